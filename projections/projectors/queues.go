package projectors

import (
	"context"
	"fmt"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// QueuesName is the queue view's projection name: never rename it.
const QueuesName = taskview.QueuesProjection

// TaskQueues builds the task views: task_queues and task_worker_commands from
// the queue and worker events, a pure read model that replays. It also
// owns task_lifecycle and task_runs, which the lifecycle sink fills from
// the lifecycle topic: a replay rebuilds them through that topic when the
// projection carries the lifecycle feed (LifecycleFeed).
func TaskQueues() *projections.Projection {
	p := projections.New(QueuesName, "task_queues", "task_worker_commands", "task_lifecycle", "task_runs")
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueuePaused) error {
		return saveQueue(ctx, tx, e.Queue, true, tasks.ActionPause, env)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueResumed) error {
		return saveQueue(ctx, tx, e.Queue, false, tasks.ActionResume, env)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueCleared) error {
		// The pause flag is whatever it was: clear keeps it. The count
		// follows with the reactor's QueueClearApplied.
		if err := tx.Exec(ctx, `
			INSERT INTO task_queues (name, is_paused, last_action, cleared, version, updated_at) VALUES ($1, false, $2, 0, $3, $4)
			ON CONFLICT (name) DO UPDATE SET last_action = excluded.last_action, version = excluded.version, updated_at = excluded.updated_at`,
			e.Queue, tasks.ActionClear, env.Version, env.OccurredAt); err != nil {
			return fmt.Errorf("queue %s: %w", e.Queue, err)
		}
		return nil
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueClearApplied) error {
		if err := tx.Exec(ctx, `
			INSERT INTO task_queues (name, is_paused, last_action, cleared, version, updated_at) VALUES ($1, false, $2, $3, $4, $5)
			ON CONFLICT (name) DO UPDATE SET cleared = task_queues.cleared + excluded.cleared, version = excluded.version`,
			e.Queue, tasks.ActionClear, e.Removed, env.Version, env.OccurredAt); err != nil {
			return fmt.Errorf("queue %s: %w", e.Queue, err)
		}
		return nil
	})
	worker := func(ctx context.Context, tx projections.Tx, env events.Envelope, id, action string) error {
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

func saveQueue(ctx context.Context, tx projections.Tx, name string, paused bool, action string, env events.Envelope) error {
	if err := tx.Exec(ctx, `
		INSERT INTO task_queues (name, is_paused, last_action, cleared, version, updated_at) VALUES ($1, $2, $3, 0, $4, $5)
		ON CONFLICT (name) DO UPDATE SET is_paused = excluded.is_paused, last_action = excluded.last_action,
			version = excluded.version, updated_at = excluded.updated_at`,
		name, paused, action, env.Version, env.OccurredAt); err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	return nil
}
