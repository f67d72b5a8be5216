package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cfgd/cfgd/commands/app/taskqueues"
)

const taskUsage = `usage: cfgd task enqueue --queue Q --type T [--payload JSON]
types: demo:sleep ({"ms": N}), demo:echo (any JSON), demo:fail ({"message": "..."})
`

// parseTaskCommand checks the arguments of `cfgd task ...`.
func parseTaskCommand(args []string, stdout, stderr io.Writer) (action, error) {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, taskUsage)
		return nil, &exitError{code: 0}
	}
	if len(args) == 0 || args[0] != "enqueue" {
		fmt.Fprint(stderr, taskUsage)
		if len(args) == 0 {
			return nil, &exitError{code: 2}
		}
		return nil, &exitError{code: 2, err: fmt.Errorf("unknown task command %q", args[0])}
	}
	fs := flag.NewFlagSet("cfgd task enqueue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, taskUsage) }
	queue := fs.String("queue", "default", "the queue (one of TASKS__QUEUES)")
	typ := fs.String("type", "", "the task type (required)")
	payload := fs.String("payload", "", "the task's JSON payload")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, &exitError{code: 0}
		}
		return nil, &exitError{code: 2}
	}
	if fs.NArg() > 0 {
		return nil, &exitError{code: 2, err: fmt.Errorf("enqueue takes no arguments, got %q", fs.Args())}
	}
	if err := taskqueues.ValidatePayload(*typ, []byte(*payload)); err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return func(ctx context.Context, log *slog.Logger, app appSettings) error {
		return enqueueTask(ctx, log, app, *queue, *typ, []byte(*payload), stdout)
	}, nil
}

func enqueueTask(ctx context.Context, log *slog.Logger, app appSettings, queue, typ string, payload []byte, stdout io.Writer) error {
	if !app.Tasks.HasQueue(queue) {
		return &exitError{code: 2, err: fmt.Errorf("%w %q (TASKS__QUEUES: %v)", taskqueues.ErrUnknownQueue, queue, app.Tasks.QueueNames())}
	}
	rdb, err := taskRedis(app)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	em, err := lifecycleEmitter(ctx, log, app)
	if err != nil || em == nil {
		return fmt.Errorf("kafka (KAFKA__BROKERS, or a running cfgd serve's embedded broker): %w", errors.Join(err, ctx.Err()))
	}
	enq := taskqueues.NewEnqueuer(app.Tasks, rdb, em)
	id, err := enq.Enqueue(ctx, queue, typ, payload)
	// Close flushes the enqueued record before the process exits.
	err = errors.Join(err, em.Close())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "enqueued %s on %s: %s\n", typ, queue, id)
	return nil
}
