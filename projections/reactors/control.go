package reactors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	ListArchivedTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	ListCompletedTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
	ArchiveTask(queue, id string) error
	RunTask(queue, id string) error
	RunAllScheduledTasks(queue string) (int, error)
	RunAllRetryTasks(queue string) (int, error)
	RunAllArchivedTasks(queue string) (int, error)
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
}

var _ Queues = (*asynq.Inspector)(nil)

// Workers is where the reactor leaves a worker's command.
type Workers interface {
	SetCommand(ctx context.Context, id string, seq int64, action string) error
}

// Clears keeps, in Redis beside the tasks, the tasks a clear is about to
// delete (id → type), so that a clear interrupted halfway and delivered
// again still closes the tasks it deleted the first time.
type Clears interface {
	NoteClearing(ctx context.Context, clear string, ts map[string]string) error
	Unnote(ctx context.Context, clear string, ids ...string) error
	Noted(ctx context.Context, clear string) (map[string]string, error)
	ForgetClear(ctx context.Context, clear string) error
}

// Registry is the Redis side of the reactor besides asynq: the workers'
// commands and the clears' notes.
type Registry interface {
	Workers
	Clears
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
// task statistics are a function of that topic alone. Task actions follow
// the same rules: one task's run, archive or delete finds the task
// already changed on a redelivery; a bulk one records its outcome
// (TasksBulkApplied, id derived from the request's) as a clear does, and
// notes the tasks it deletes or archives first; deleted and archived
// tasks get their lifecycle record.
func Control(q Queues, w Registry, pub Publisher, db store.DB) *projections.Projection {
	p := projections.NewReactor(ControlName)
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueuePaused) error {
		return redisRetrying(ctx, func() error {
			if err := q.PauseQueue(e.Queue); err != nil && !strings.Contains(err.Error(), "already paused") {
				return fmt.Errorf("pause %s: %w", e.Queue, err)
			}
			return nil
		})
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueResumed) error {
		return redisRetrying(ctx, func() error {
			if err := q.UnpauseQueue(e.Queue); err != nil && !strings.Contains(err.Error(), "not paused") {
				return fmt.Errorf("resume %s: %w", e.Queue, err)
			}
			return nil
		})
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.QueueCleared) error {
		id := tasks.ClearAppliedID(env.ID)
		done, err := recorded(ctx, tx, id)
		if err != nil || done {
			return err
		}
		key := id.String()
		var removed map[string]string
		if err := redisRetrying(ctx, func() error {
			var err error
			removed, err = clear(ctx, q, w, key, e.Queue)
			return err
		}); err != nil {
			return err
		}
		recs := make([]tasks.Lifecycle, 0, len(removed))
		for tid, typ := range removed {
			recs = append(recs, tasks.Lifecycle{TaskID: tid, Queue: e.Queue, Type: typ, Step: tasks.StepCleared, At: e.At})
		}
		return applied(ctx, tx, db, pub, w, env, id, recs, tasks.QueueClearApplied{Queue: e.Queue, Removed: len(removed), At: e.At},
			"clear "+e.Queue)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.TaskActionRequested) error {
		var applied bool
		if err := redisRetrying(ctx, func() error {
			var err error
			applied, err = actOnTask(q, e.Action, e.Queue, e.TaskID)
			return err
		}); err != nil {
			return err
		}
		rec, ok := taskRecord(e.Action, e.Queue, e.TaskID, e.Type, e.Retried, e.At)
		if !applied || !ok {
			return nil
		}
		if err := publishRetrying(ctx, pub, []tasks.Lifecycle{rec}); err != nil {
			return fmt.Errorf("%s %s: lifecycle: %w", e.Action, e.TaskID, err)
		}
		return nil
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *tasks.TasksBulkRequested) error {
		id := tasks.BulkAppliedID(env.ID)
		done, err := recorded(ctx, tx, id)
		if err != nil || done {
			return err
		}
		key := id.String()
		var n int
		var changed map[string]string
		if err := redisRetrying(ctx, func() error {
			var err error
			n, changed, err = bulk(ctx, q, w, key, e.Action, e.Queue, e.State)
			return err
		}); err != nil {
			return err
		}
		recs := make([]tasks.Lifecycle, 0, len(changed))
		for tid, note := range changed {
			retried, typ, _ := strings.Cut(note, ":")
			r, _ := strconv.Atoi(retried)
			if rec, ok := taskRecord(e.Action, e.Queue, tid, typ, r, e.At); ok {
				recs = append(recs, rec)
			}
		}
		return applied(ctx, tx, db, pub, w, env, id, recs, tasks.TasksBulkApplied{Queue: e.Queue, State: e.State, Action: e.Action, Affected: n, At: e.At},
			fmt.Sprintf("%s %s tasks of %s", e.Action, e.State, e.Queue))
	})
	worker := func(ctx context.Context, env events.Envelope, id, action string) error {
		return redisRetrying(ctx, func() error { return w.SetCommand(ctx, id, env.Version, action) })
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

// applied finishes the clear or bulk action env asked for, carried out
// with its notes under id (its outcome's event id): the lifecycle
// records of the tasks it changed, in task order, then the outcome, then
// the notes forgotten. what names the action in errors.
func applied(ctx context.Context, tx projections.Tx, db store.DB, pub Publisher, w Registry, env events.Envelope, id uuid.UUID,
	recs []tasks.Lifecycle, outcome events.Event, what string) error {
	slices.SortFunc(recs, func(a, b tasks.Lifecycle) int { return strings.Compare(a.TaskID, b.TaskID) })
	if err := publishRetrying(ctx, pub, recs); err != nil {
		return fmt.Errorf("%s: lifecycle: %w", what, err)
	}
	out, err := events.New(env.Stream, outcome,
		events.Metadata{CorrelationID: env.Metadata.CorrelationID, CausationID: env.ID.String(), Actor: ControlName}, env.OccurredAt)
	if err != nil {
		return err
	}
	out.ID = id
	// Committed on its own, before the checkpoint: a retried batch
	// (rolled back after the handler ran) finds it.
	if _, err := store.Append(ctx, db, env.Stream, events.AnyVersion, out); err != nil {
		if done, rerr := recorded(ctx, tx, id); rerr == nil && done {
			return nil
		}
		return fmt.Errorf("%s: record: %w", what, err)
	}
	// The outcome is recorded: the notes are history (they expire on
	// their own if this fails).
	_ = w.ForgetClear(ctx, id.String())
	return nil
}

// actOnTask carries out action on one task and tells whether the task is
// now as the action leaves it. A task gone or already changed (a
// redelivery) counts as done; a task that moved on by itself (a worker
// took it) is left alone, and no record is written for it.
func actOnTask(q Queues, action, queue, id string) (bool, error) {
	var err error
	var done string
	switch action {
	case tasks.ActionRun, tasks.ActionRetry:
		err, done = q.RunTask(queue, id), tasks.StatePending
	case tasks.ActionArchive:
		err, done = q.ArchiveTask(queue, id), tasks.StateArchived
	case tasks.ActionDelete:
		err = q.DeleteTask(queue, id)
	default:
		return false, nil // the command refuses any other; nothing to do
	}
	switch {
	case err == nil:
		return true, nil
	case gone(err):
		return action == tasks.ActionDelete, nil
	}
	info, ierr := q.GetTaskInfo(queue, id)
	switch {
	case gone(ierr):
		return action == tasks.ActionDelete, nil
	case ierr != nil:
		return false, fmt.Errorf("%s %s: %w", action, id, errors.Join(err, ierr))
	case slices.Contains(tasks.ActionFrom(action), info.State.String()):
		return false, fmt.Errorf("%s %s: %w", action, id, err) // still there: Redis failed it
	}
	return info.State.String() == done, nil
}

// taskRecord is the lifecycle record of a task action, so the statistics
// see a deleted task end and an archived one wait; running a task needs
// none (its run records follow).
func taskRecord(action, queue, id, typ string, retried int, at time.Time) (tasks.Lifecycle, bool) {
	switch action {
	case tasks.ActionDelete:
		return tasks.Lifecycle{TaskID: id, Queue: queue, Type: typ, Step: tasks.StepDeleted, At: at}, true
	case tasks.ActionArchive:
		return tasks.Lifecycle{TaskID: id, Queue: queue, Type: typ, Step: tasks.StepArchived, Attempt: retried, At: at}, true
	}
	return tasks.Lifecycle{}, false
}

// bulk carries out action on every task of queue in state and returns
// how many it changed and, for a delete or archive, the changed tasks
// (id → "retried:type").
func bulk(ctx context.Context, q Queues, notes Clears, key, action, queue, state string) (int, map[string]string, error) {
	if action == tasks.ActionRun || action == tasks.ActionRetry {
		runs := map[string]func(string) (int, error){
			tasks.StateScheduled: q.RunAllScheduledTasks, tasks.StateRetry: q.RunAllRetryTasks, tasks.StateArchived: q.RunAllArchivedTasks,
		}
		run, ok := runs[state]
		if !ok {
			return 0, nil, nil // the command refuses any other state
		}
		known, err := q.Queues()
		if err != nil || !slices.Contains(known, queue) {
			return 0, nil, err
		}
		n, err := run(queue)
		if err != nil {
			return 0, nil, fmt.Errorf("%s %s tasks of %s: %w", action, state, queue, err)
		}
		return n, nil, nil
	}
	lists := map[string]lister{
		tasks.StatePending: q.ListPendingTasks, tasks.StateScheduled: q.ListScheduledTasks, tasks.StateRetry: q.ListRetryTasks,
		tasks.StateArchived: q.ListArchivedTasks, tasks.StateCompleted: q.ListCompletedTasks,
	}
	list, ok := lists[state]
	if !ok || !slices.Contains(tasks.ActionFrom(action), state) {
		return 0, nil, nil
	}
	sw := sweep{lists: []lister{list}, from: []string{state},
		note: func(t *asynq.TaskInfo) string { return strconv.Itoa(t.Retried) + ":" + t.Type }}
	switch action {
	case tasks.ActionDelete:
		sw.act = q.DeleteTask
	case tasks.ActionArchive:
		sw.act, sw.done = q.ArchiveTask, tasks.StateArchived
	default:
		return 0, nil, nil
	}
	changed, err := sweepQueue(ctx, q, notes, key, queue, sw)
	if err != nil {
		return 0, nil, err
	}
	return len(changed), changed, nil
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

// redisRetrying runs op until it succeeds or ctx ends. Every error of
// asynq's inspector here is Redis being away or slow (the queue names were
// validated by the command), which says nothing about the event: giving
// up would dead-letter a pause that the API and the read model show as
// done while the workers go on taking the queue's tasks. The reactor
// waits for Redis instead, as it waits for Kafka.
func redisRetrying(ctx context.Context, op func() error) error {
	bo := process.Backoff(100*time.Millisecond, 5*time.Second)
	for {
		err := op()
		if err == nil {
			return nil
		}
		if !process.Wait(ctx, bo) {
			return errors.Join(err, ctx.Err())
		}
	}
}

// clearPage bounds one listing; clear loops until nothing waits.
const clearPage = 500

// lister lists one state's tasks of a queue.
type lister func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error)

// sweep is what a clear or a bulk delete or archive does to each task:
// lists are the states it takes tasks from (from: their names), act the
// change, note what is kept of a task to write its lifecycle record.
type sweep struct {
	lists []lister
	from  []string
	act   func(queue, id string) error
	// done is the state act leaves a task in ("" when it is gone).
	done string
	note func(t *asynq.TaskInfo) string
}

// clear deletes every waiting task (pending, scheduled, retry) of queue
// one by one and returns the tasks it removed (id → type); running,
// completed and archived tasks stay.
func clear(ctx context.Context, q Queues, notes Clears, key, queue string) (map[string]string, error) {
	return sweepQueue(ctx, q, notes, key, queue, sweep{
		lists: []lister{q.ListPendingTasks, q.ListScheduledTasks, q.ListRetryTasks},
		from:  []string{tasks.StatePending, tasks.StateScheduled, tasks.StateRetry},
		act:   q.DeleteTask,
		note:  func(t *asynq.TaskInfo) string { return t.Type },
	})
}

// sweepQueue acts on every task of queue that sw lists, one by one, and
// returns the tasks it changed (id → note). Each page is noted under key
// before its tasks are changed, and a task a worker took first is
// unnoted, so a sweep cut off halfway (a crash, Redis gone) and run again
// finds the tasks it changed the first time in the notes: they are
// closed in the statistics all the same.
func sweepQueue(ctx context.Context, q Queues, notes Clears, key, queue string, sw sweep) (map[string]string, error) {
	// What an earlier, interrupted run noted: still there (noted, not yet
	// changed), taken by a worker meanwhile, or changed by that run.
	prior, err := notes.Noted(ctx, key)
	if err != nil {
		return nil, err
	}
	for id := range prior {
		if err := remove(ctx, q, notes, key, queue, id, true, sw); err != nil {
			return nil, err
		}
	}
	known, err := q.Queues()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", queue, err)
	}
	if slices.Contains(known, queue) {
		for _, list := range sw.lists {
			for range 10_000 { // bounded: a producer faster than the sweep cannot keep it here forever
				page, err := list(queue, asynq.PageSize(clearPage))
				if err != nil {
					return nil, fmt.Errorf("%s: %w", queue, err)
				}
				ts := make(map[string]string, len(page))
				for _, t := range page {
					ts[t.ID] = sw.note(t)
				}
				if err := notes.NoteClearing(ctx, key, ts); err != nil {
					return nil, err
				}
				before := len(page)
				for _, t := range page {
					if err := remove(ctx, q, notes, key, queue, t.ID, false, sw); err != nil {
						return nil, err
					}
				}
				if before < clearPage {
					break
				}
				// A page that a worker emptied before the sweep could is
				// nothing left to do.
				left, err := notes.Noted(ctx, key)
				if err != nil {
					return nil, err
				}
				if n := countOf(left, page); n == 0 {
					break
				}
			}
		}
	}
	return notes.Noted(ctx, key)
}

func gone(err error) bool {
	return errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound)
}

// remove changes the noted task id; when it is not in a state the sweep
// takes tasks from any more, a worker took it and it is unnoted. A task
// that is gone was either finished by a worker (listed by this run:
// unnoted) or changed by the run that noted it before it was cut off
// (prior: stays noted).
func remove(ctx context.Context, q Queues, notes Clears, key, queue, id string, prior bool, sw sweep) error {
	err := sw.act(queue, id)
	switch {
	case err == nil:
		return nil
	case gone(err) && prior:
		return nil
	case gone(err):
		return notes.Unnote(ctx, key, id)
	}
	info, ierr := q.GetTaskInfo(queue, id)
	switch {
	case gone(ierr) && prior:
		return nil
	case gone(ierr):
		return notes.Unnote(ctx, key, id)
	case ierr != nil:
		return fmt.Errorf("%s: task %s: %w", queue, id, errors.Join(err, ierr))
	case slices.Contains(sw.from, info.State.String()):
		return fmt.Errorf("%s: task %s: %w", queue, id, err) // still there: Redis failed the change
	case prior && sw.done != "" && info.State.String() == sw.done:
		return nil // the earlier run changed it
	}
	return notes.Unnote(ctx, key, id)
}

func countOf(noted map[string]string, page []*asynq.TaskInfo) int {
	n := 0
	for _, t := range page {
		if _, ok := noted[t.ID]; ok {
			n++
		}
	}
	return n
}
