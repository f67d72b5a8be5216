package projectors

import (
	"context"

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
		return taskview.SaveQueue(ctx, tx, e.Queue, true, tasks.ActionPause, env.Version, env.OccurredAt)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueResumed) error {
		return taskview.SaveQueue(ctx, tx, e.Queue, false, tasks.ActionResume, env.Version, env.OccurredAt)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueCleared) error {
		// The count follows with the reactor's QueueClearApplied.
		return taskview.SaveQueueCleared(ctx, tx, e.Queue, tasks.ActionClear, env.Version, env.OccurredAt)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueClearApplied) error {
		return taskview.AddQueueCleared(ctx, tx, e.Queue, tasks.ActionClear, e.Removed, env.Version, env.OccurredAt)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.WorkerStartRequested) error {
		return taskview.SaveWorkerCommand(ctx, tx, e.WorkerID, tasks.ActionStart, env.Version, env.OccurredAt)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.WorkerStopRequested) error {
		return taskview.SaveWorkerCommand(ctx, tx, e.WorkerID, tasks.ActionStop, env.Version, env.OccurredAt)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.WorkerRestartRequested) error {
		return taskview.SaveWorkerCommand(ctx, tx, e.WorkerID, tasks.ActionRestart, env.Version, env.OccurredAt)
	})
	return p
}
