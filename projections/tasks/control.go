// Package tasks projects task-queue management into Postgres: the
// tasks.control reactor carries out the staff's queue and worker commands
// (asynq's inspector for queues, the worker registry for workers) and
// records the resulting state; the lifecycle sink turns the workers'
// lifecycle records into per-task rows that the statistics count.
package tasks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections"
)

// ControlName is the reactor's projection name: never rename it.
const ControlName = "tasks.control"

// Queues is what the reactor needs of asynq's inspector.
type Queues interface {
	PauseQueue(queue string) error
	UnpauseQueue(queue string) error
	Queues() ([]string, error)
	ListPendingTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	ListScheduledTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	ListRetryTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
}

var _ Queues = (*asynq.Inspector)(nil)

// Workers is where the reactor leaves a worker's command.
type Workers interface {
	SetCommand(ctx context.Context, id string, seq int64, action string) error
}

// Control is the reactor. Each effect is idempotent (pausing a paused
// queue, clearing an empty one, repeating a command with the same
// sequence number), so a redelivery before the checkpoint committed does
// no harm; the checkpoint keeps it from running again after.
func Control(q Queues, w Workers) *projections.Projection {
	p := projections.NewReactor(ControlName, "task_queues", "task_worker_commands")
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueuePaused) error {
		if err := q.PauseQueue(e.Queue); err != nil && !strings.Contains(err.Error(), "already paused") {
			return fmt.Errorf("pause %s: %w", e.Queue, err)
		}
		return saveQueue(ctx, tx, e.Queue, true, tasks.ActionPause, 0, env)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueResumed) error {
		if err := q.UnpauseQueue(e.Queue); err != nil && !strings.Contains(err.Error(), "not paused") {
			return fmt.Errorf("resume %s: %w", e.Queue, err)
		}
		return saveQueue(ctx, tx, e.Queue, false, tasks.ActionResume, 0, env)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueCleared) error {
		removed, err := clear(q, e.Queue)
		if err != nil {
			return err
		}
		recs := make([]tasks.Lifecycle, len(removed))
		for i, t := range removed {
			recs[i] = tasks.Lifecycle{TaskID: t.ID, Queue: e.Queue, Type: t.Type, Step: StepCleared, At: e.At}
		}
		for _, r := range recs {
			if err := tx.Exec(ctx, lifecycleSQL, lifecycleArgs(r)...); err != nil {
				return fmt.Errorf("task lifecycle: %w", err)
			}
		}
		// The pause flag is whatever it was: clear keeps it.
		if err := tx.Exec(ctx, `
			INSERT INTO task_queues (name, is_paused, last_action, cleared, version, updated_at) VALUES ($1, false, $2, $3, $4, $5)
			ON CONFLICT (name) DO UPDATE SET last_action = excluded.last_action, cleared = task_queues.cleared + excluded.cleared,
				version = excluded.version, updated_at = excluded.updated_at`,
			e.Queue, tasks.ActionClear, len(removed), env.Version, env.OccurredAt); err != nil {
			return fmt.Errorf("queue %s: %w", e.Queue, err)
		}
		return nil
	})
	worker := func(ctx context.Context, tx projections.Tx, env events.Envelope, id, action string) error {
		if err := w.SetCommand(ctx, id, env.Version, action); err != nil {
			return err
		}
		if err := tx.Exec(ctx, `
			INSERT INTO task_worker_commands (worker_id, action, version, requested_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (worker_id) DO UPDATE SET action = excluded.action, version = excluded.version, requested_at = excluded.requested_at`,
			id, action, env.Version, env.OccurredAt); err != nil {
			return fmt.Errorf("worker %s: %w", id, err)
		}
		return nil
	}
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.WorkerStartRequested) error {
		return worker(ctx, tx, env, e.WorkerID, tasks.ActionStart)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.WorkerStopRequested) error {
		return worker(ctx, tx, env, e.WorkerID, tasks.ActionStop)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.WorkerRestartRequested) error {
		return worker(ctx, tx, env, e.WorkerID, tasks.ActionRestart)
	})
	return p
}

func saveQueue(ctx context.Context, tx projections.Tx, name string, paused bool, action string, cleared int, env events.Envelope) error {
	if err := tx.Exec(ctx, `
		INSERT INTO task_queues (name, is_paused, last_action, cleared, version, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (name) DO UPDATE SET is_paused = excluded.is_paused, last_action = excluded.last_action,
			version = excluded.version, updated_at = excluded.updated_at`,
		name, paused, action, cleared, env.Version, env.OccurredAt); err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	return nil
}

// clearPage bounds one listing; clear loops until nothing waits.
const clearPage = 500

// clear deletes every waiting task (pending, scheduled, retry) of queue
// one by one, so it knows exactly which tasks it removed and can close
// them in the statistics; running, completed and archived tasks stay.
func clear(q Queues, queue string) ([]*asynq.TaskInfo, error) {
	known, err := q.Queues()
	if err != nil {
		return nil, fmt.Errorf("clear %s: %w", queue, err)
	}
	found := false
	for _, k := range known {
		found = found || k == queue
	}
	if !found {
		return nil, nil // nothing was ever enqueued
	}
	var removed []*asynq.TaskInfo
	lists := []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){q.ListPendingTasks, q.ListScheduledTasks, q.ListRetryTasks}
	for _, list := range lists {
		for range 10_000 { // bounded: a producer faster than the clear cannot keep it here forever
			page, err := list(queue, asynq.PageSize(clearPage))
			if err != nil {
				return nil, fmt.Errorf("clear %s: %w", queue, err)
			}
			n := 0
			for _, t := range page {
				// A task that a worker took meanwhile is no longer waiting.
				if err := q.DeleteTask(queue, t.ID); err != nil {
					continue
				}
				removed = append(removed, t)
				n++
			}
			if len(page) < clearPage || n == 0 {
				break
			}
		}
	}
	return removed, nil
}

// StepCleared closes a task that a clear removed before it ran.
const StepCleared = "cleared"

// rank orders steps: later attempts after earlier ones, an attempt's
// outcome after its start, and an end (succeeded, failed, cleared) after
// everything.
func rank(step string, attempt int) int64 {
	switch step {
	case tasks.StepSucceeded, tasks.StepFailed, StepCleared:
		return 1 << 40
	case tasks.StepStarted:
		return int64(attempt)*10 + 1
	case tasks.StepRetried:
		return int64(attempt)*10 + 2
	}
	return 0
}

// lifecycleSQL records one lifecycle step; a step already recorded changes
// nothing, so a redelivered record is harmless.
const lifecycleSQL = `
			WITH step AS (
				INSERT INTO task_lifecycle (task_id, step, attempt, queue, type, worker_id, error, at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				ON CONFLICT DO NOTHING
				RETURNING task_id
			)
			INSERT INTO task_runs AS r (task_id, queue, type, state, rank, attempts, worker_id, error, enqueued_at, finished_at, updated_at)
			SELECT $1, $4, $5, $2, $9, $3, $6, $7, $10, $11, $8 FROM step
			ON CONFLICT (task_id) DO UPDATE SET
				queue = excluded.queue, type = excluded.type,
				state = CASE WHEN excluded.rank >= r.rank THEN excluded.state ELSE r.state END,
				error = CASE WHEN excluded.rank >= r.rank AND excluded.error <> '' THEN excluded.error ELSE r.error END,
				worker_id = CASE WHEN excluded.worker_id <> '' THEN excluded.worker_id ELSE r.worker_id END,
				rank = greatest(r.rank, excluded.rank),
				attempts = greatest(r.attempts, excluded.attempts),
				enqueued_at = coalesce(r.enqueued_at, excluded.enqueued_at),
				finished_at = coalesce(r.finished_at, excluded.finished_at),
				updated_at = greatest(r.updated_at, excluded.updated_at)`

func lifecycleArgs(r tasks.Lifecycle) []any {
	at := r.At
	if at.IsZero() {
		at = time.Now().UTC()
	}
	var enq, fin *time.Time
	if r.Step == tasks.StepEnqueued {
		enq = &at
	}
	if tasks.Terminal(r.Step) || r.Step == StepCleared {
		fin = &at
	}
	return []any{r.TaskID, r.Step, r.Attempt, r.Queue, r.Type, r.WorkerID, r.Error, at, rank(r.Step, r.Attempt), enq, fin}
}

// ApplyLifecycle records recs in tx, in one round trip.
func ApplyLifecycle(ctx context.Context, tx pgx.Tx, recs []tasks.Lifecycle) error {
	if len(recs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, r := range recs {
		b.Queue(lifecycleSQL, lifecycleArgs(r)...)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("task lifecycle: %w", err)
	}
	return nil
}
