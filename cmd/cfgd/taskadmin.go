package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// taskAdminCommands are `cfgd task list|inspect|retry|delete|archive`:
// the dashboard's Tasks tab at a prompt. The actions are the same
// commands (queue events) a running `cfgd serve` carries out.
func taskAdminCommands() []*cobra.Command {
	var (
		queue, state string
		limit        int
		asJSON       bool
	)
	list := &cobra.Command{
		Use:   "list [--queue Q] [--state S] [--limit N] [--json]",
		Short: "list tasks by queue and state, with payload and last error",
		Long: `list prints the tasks asynq holds now: per queue (every configured queue and any
other asynq knows, or --queue) and state (` + strings.Join(tasks.TaskStates(), ", ") + `, or --state),
at most --limit each.`,
		Example: "  cfgd task list --state retry\n  cfgd task list --queue default --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if state != "" && !slices.Contains(tasks.TaskStates(), state) {
				return &exitError{code: 2, err: fmt.Errorf("--state: one of %s, got %q", strings.Join(tasks.TaskStates(), ", "), state)}
			}
			if limit < 1 || limit > taskview.MaxTasksPage {
				return &exitError{code: 2, err: fmt.Errorf("--limit: from 1 to %d", taskview.MaxTasksPage)}
			}
			return withSettings(cmd.Context(), cmd.ErrOrStderr(), func(ctx context.Context, log *slog.Logger, app appSettings) error {
				return withTaskApp(ctx, log, app, func(ctx context.Context, a *taskqueues.App) error {
					return listTasks(ctx, a, queue, state, limit, asJSON, cmd.OutOrStdout())
				})
			})
		},
	}
	list.Flags().StringVar(&queue, "queue", "", "only this queue")
	list.Flags().StringVar(&state, "state", "", "only this state")
	list.Flags().IntVar(&limit, "limit", 20, "at most this many tasks per queue and state")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON (the REST list's item shape) instead of a table")

	one := func(use, short, long, example string, run func(ctx context.Context, a *taskqueues.App, id, queue string, asJSON bool, stdout io.Writer) error) *cobra.Command {
		var queue string
		var asJSON bool
		c := &cobra.Command{
			Use: use + " ID [--queue Q] [--json]", Short: short, Long: long, Example: example,
			Args: func(cmd *cobra.Command, args []string) error {
				if len(args) != 1 || !taskqueues.ValidName(args[0]) {
					return &exitError{code: 2, err: fmt.Errorf("%s takes one task id, got %q", commandName(cmd), args)}
				}
				return nil
			},
			RunE: func(cmd *cobra.Command, args []string) error {
				return withSettings(cmd.Context(), cmd.ErrOrStderr(), func(ctx context.Context, log *slog.Logger, app appSettings) error {
					return withTaskApp(ctx, log, app, func(ctx context.Context, a *taskqueues.App) error {
						return run(ctx, a, args[0], queue, asJSON, cmd.OutOrStdout())
					})
				})
			},
		}
		c.Flags().StringVar(&queue, "queue", "", "the task's queue; default: the one its records name, else every queue asynq knows")
		c.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
		return c
	}
	inspect := one("inspect", "show one task: state, payload, last error, retries",
		"inspect prints one task as asynq holds it now, and the actions that apply to it.",
		"  cfgd task inspect 3f0c…", inspectTask)
	act := func(action, short string) *cobra.Command {
		return one(action, short,
			short+`: a command (an event on the queue's stream) that a running cfgd serve carries out;
it waits TASKS__APPLY_WAIT for the effect.`,
			"  cfgd task "+action+" 3f0c…",
			func(ctx context.Context, a *taskqueues.App, id, queue string, asJSON bool, stdout io.Writer) error {
				return actOnTask(ctx, a, action, id, queue, asJSON, stdout)
			})
	}
	return []*cobra.Command{list, inspect,
		act(tasks.ActionRetry, "run a scheduled, retry or archived task now"),
		act(tasks.ActionDelete, "delete a task that is not running"),
		act(tasks.ActionArchive, "archive a waiting task")}
}

// withTaskApp runs fn with the task core on Postgres and the tasks'
// Redis, each reached within 3 s or named with the next step.
func withTaskApp(ctx context.Context, log *slog.Logger, app appSettings, fn func(ctx context.Context, a *taskqueues.App) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rdb, err := taskRedis(app)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := reach(ctx, redisDep("TASKS__REDIS_URL", app.Tasks.RedisURL, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })); err != nil {
		return err
	}
	d, err := postgresDeps(ctx, log, app)
	if err != nil {
		return err
	}
	defer d.Close()
	a, err := taskqueues.New(app.Tasks, taskqueues.Deps{Pool: d.pg, Events: d.events, Redis: rdb, Log: log, Now: time.Now})
	if err != nil {
		return err
	}
	defer a.Close()
	// No relay runs here: the running server's is woken at once.
	a.Stored = func(ctx context.Context) { wakeRelay(ctx, log, d) }
	return fn(ctx, a)
}

func listTasks(ctx context.Context, a *taskqueues.App, queue, state string, limit int, asJSON bool, stdout io.Writer) error {
	queues := []string{queue}
	if queue == "" {
		qs, err := a.Reader.QueueStatusAll(ctx)
		if err != nil {
			return err
		}
		queues = queues[:0]
		for _, q := range qs {
			queues = append(queues, q.Name)
		}
	}
	states := tasks.TaskStates()
	if state != "" {
		states = []string{state}
	}
	all := []taskview.TaskInfo{}
	for _, q := range queues {
		for _, st := range states {
			ts, err := a.Reader.Tasks(q, st, 1, limit)
			if err != nil {
				return err
			}
			all = append(all, ts...)
		}
	}
	if asJSON {
		return printJSON(stdout, all)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSTATE\tID\tTYPE\tRETRIED\tLAST ERROR\tPAYLOAD")
	for _, t := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", t.Queue, t.State, t.ID, t.Type, t.Retried, t.MaxRetry, short(t.LastError, 40), short(t.Payload, 60))
	}
	return tw.Flush()
}

// short keeps a table row on one line.
func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func printJSON(stdout io.Writer, v any) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func notFound(id string, err error) error {
	if errors.Is(err, taskview.ErrTaskNotFound) {
		return &exitError{code: 1, err: fmt.Errorf("task %s: not found (asynq has no such task; `cfgd task list` shows those it has)", id)}
	}
	return err
}

func inspectTask(ctx context.Context, a *taskqueues.App, id, queue string, asJSON bool, stdout io.Writer) error {
	t, err := a.Reader.Task(ctx, queue, id)
	if err != nil {
		return notFound(id, err)
	}
	if asJSON {
		return printJSON(stdout, t)
	}
	printTask(stdout, t)
	return nil
}

func printTask(stdout io.Writer, t taskview.TaskInfo) {
	at := func(p *time.Time) string {
		if p == nil {
			return "-"
		}
		return p.Format(time.RFC3339)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"ID", t.ID}, {"QUEUE", t.Queue}, {"TYPE", t.Type}, {"STATE", t.State},
		{"PAYLOAD", t.Payload}, {"LAST ERROR", short(t.LastError, 200)}, {"RETRIED", fmt.Sprintf("%d/%d", t.Retried, t.MaxRetry)},
		{"LAST FAILED", at(t.LastFailedAt)}, {"NEXT RUN", at(t.NextProcessAt)}, {"COMPLETED", at(t.CompletedAt)},
		{"ACTIONS", strings.Join(t.Actions, ", ")},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
	}
	_ = tw.Flush()
}

func actOnTask(ctx context.Context, a *taskqueues.App, action, id, queue string, asJSON bool, stdout io.Writer) error {
	res, ap, err := a.ManageTask(ctx, action, queue, id, events.Metadata{Actor: "cli"})
	var na *taskqueues.NotApplicableError
	switch {
	case errors.As(err, &na):
		return &exitError{code: 1, err: fmt.Errorf("task %s: %w", id, err)}
	case errors.Is(err, taskqueues.ErrNotYetApplied):
		fmt.Fprintf(stdout, "%s of task %s stored (%s version %d); no running cfgd serve carried it out within %s: it will once one runs\n",
			action, id, ap.Stream, ap.Version, a.Config.ApplyWait)
		return nil
	case err != nil:
		return notFound(id, err)
	}
	if asJSON {
		return printJSON(stdout, map[string]any{"action": action, "task": res.Task})
	}
	if res.Task == nil {
		fmt.Fprintf(stdout, "task %s: %s done; it is gone\n", id, action)
		return nil
	}
	fmt.Fprintf(stdout, "task %s: %s done; now %s\n", id, action, res.Task.State)
	return nil
}
