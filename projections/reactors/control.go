package reactors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections"
)

// ControlName is the reactor's projection name: never rename it.
const ControlName = tasks.ControlReactor

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

// Publisher sends lifecycle records to the lifecycle topic and returns
// once the broker has them.
type Publisher interface {
	PublishLifecycle(ctx context.Context, recs []tasks.Lifecycle) error
}

// Control is the reactor: it carries out the commands and writes no read
// model (Views builds the views from the same events, and replays). Each
// effect is idempotent (pausing a paused queue, repeating a command with
// the same sequence number), so a redelivery before the checkpoint
// committed does no harm; the checkpoint keeps it from running again
// after. A clear is not idempotent by itself (tasks enqueued since would
// go too), so it records its outcome as a QueueClearApplied event with an
// id derived from the clear's: a redelivered clear finds it and stops.
// The cleared tasks' lifecycle records go to the lifecycle topic first, so
// task statistics are a function of that topic alone.
func Control(q Queues, w Workers, pub Publisher, db store.DB) *projections.Projection {
	p := projections.NewReactor(ControlName)
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueuePaused) error {
		if err := q.PauseQueue(e.Queue); err != nil && !strings.Contains(err.Error(), "already paused") {
			return fmt.Errorf("pause %s: %w", e.Queue, err)
		}
		return nil
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueResumed) error {
		if err := q.UnpauseQueue(e.Queue); err != nil && !strings.Contains(err.Error(), "not paused") {
			return fmt.Errorf("resume %s: %w", e.Queue, err)
		}
		return nil
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueCleared) error {
		id := tasks.ClearAppliedID(env.ID)
		done, err := recorded(ctx, tx, id)
		if err != nil || done {
			return err
		}
		removed, err := clear(q, e.Queue)
		if err != nil {
			return err
		}
		recs := make([]tasks.Lifecycle, len(removed))
		for i, t := range removed {
			recs[i] = tasks.Lifecycle{TaskID: t.ID, Queue: e.Queue, Type: t.Type, Step: tasks.StepCleared, At: e.At}
		}
		if err := publishRetrying(ctx, pub, recs); err != nil {
			return fmt.Errorf("clear %s: lifecycle: %w", e.Queue, err)
		}
		out, err := events.New(env.Stream, tasks.QueueClearApplied{Queue: e.Queue, Removed: len(removed), At: e.At},
			events.Metadata{CorrelationID: env.Metadata.CorrelationID, CausationID: env.ID.String(), Actor: ControlName}, env.OccurredAt)
		if err != nil {
			return err
		}
		out.ID = id
		// Committed on its own, before the checkpoint: a retried batch
		// (rolled back after this handler ran) finds it.
		if _, err := store.Append(ctx, db, env.Stream, events.AnyVersion, out); err != nil {
			if done, rerr := recorded(ctx, tx, id); rerr == nil && done {
				return nil
			}
			return fmt.Errorf("clear %s: record: %w", e.Queue, err)
		}
		return nil
	})
	worker := func(ctx context.Context, env events.Envelope, id, action string) error {
		return w.SetCommand(ctx, id, env.Version, action)
	}
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.WorkerStartRequested) error {
		return worker(ctx, env, e.WorkerID, tasks.ActionStart)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.WorkerStopRequested) error {
		return worker(ctx, env, e.WorkerID, tasks.ActionStop)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.WorkerRestartRequested) error {
		return worker(ctx, env, e.WorkerID, tasks.ActionRestart)
	})
	return p
}

// publishRetrying publishes recs until the broker takes them or ctx ends.
// The tasks are deleted already: a handler error would have the runner
// retry the clear, which finds nothing left to delete, and, after a few
// attempts, dead-letter it, so the removed tasks would never be closed in
// the statistics. Waiting for Kafka holds this reactor back instead.
func publishRetrying(ctx context.Context, pub Publisher, recs []tasks.Lifecycle) error {
	bo := process.Backoff(100*time.Millisecond, 5*time.Second)
	for {
		err := pub.PublishLifecycle(ctx, recs)
		if err == nil {
			return nil
		}
		if !process.Wait(ctx, bo) {
			return errors.Join(err, ctx.Err())
		}
	}
}

// recorded tells whether the event id is stored.
func recorded(ctx context.Context, tx projections.Tx, id uuid.UUID) (bool, error) {
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM events WHERE event_id = $1)`, id).Scan(&ok); err != nil {
		return false, fmt.Errorf("clear outcome %s: %w", id, err)
	}
	return ok, nil
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
