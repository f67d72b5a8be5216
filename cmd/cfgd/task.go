package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/cfgd/cfgd/commands/app/taskqueues"
)

// taskCommand is `cfgd task enqueue|list|inspect|retry|delete|archive`.
func taskCommand() *cobra.Command {
	var queue, typ, payload string
	enqueue := &cobra.Command{
		Use:   "enqueue --queue Q --type T [--payload JSON]",
		Short: "put a task on a queue and print its id",
		Long: `enqueue puts a task on a queue of TASKS__QUEUES and prints its id.

types: demo:sleep ({"ms": N}), demo:echo (any JSON), demo:fail ({"message": "..."})`,
		Example: `  cfgd task enqueue --queue default --type demo:sleep --payload '{"ms": 3000}'`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := taskqueues.ValidatePayload(typ, []byte(payload)); err != nil {
				return &exitError{code: 2, err: err}
			}
			return withSettings(cmd.Context(), cmd.ErrOrStderr(), func(ctx context.Context, log *slog.Logger, app appSettings) error {
				return enqueueTask(ctx, log, app, queue, typ, []byte(payload), cmd.OutOrStdout())
			})
		},
	}
	enqueue.Flags().StringVar(&queue, "queue", "default", "the queue (one of TASKS__QUEUES)")
	enqueue.Flags().StringVar(&typ, "type", "", "the task type (required)")
	enqueue.Flags().StringVar(&payload, "payload", "", "the task's JSON payload")
	return parentCommand("task", "put tasks on the queues, list, inspect and act on them", append([]*cobra.Command{enqueue}, taskAdminCommands()...)...)
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
	// The task goes to Redis and its "enqueued" record to Kafka, which the
	// statistics count: both must answer, and a missing one is named at
	// once rather than after the 30 s below.
	if err := reach(ctx, redisDep("TASKS__REDIS_URL", app.Tasks.RedisURL, func(ctx context.Context) error { return rdb.Ping(ctx).Err() }), kafkaDep(app.Core)); err != nil {
		return err
	}
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
