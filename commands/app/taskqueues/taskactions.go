package taskqueues

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// ErrNotApplicable is a task action that makes no sense in the task's (or
// the bulk's) state: running a pending task, archiving a running one.
var ErrNotApplicable = errors.New("action does not apply")

// NotApplicableError says which action met which state.
type NotApplicableError struct{ Action, State string }

func (e *NotApplicableError) Error() string {
	return fmt.Sprintf("cannot %s a task that is %s (%s applies to: %v)", e.Action, e.State, e.Action, tasks.ActionFrom(e.Action))
}

func (e *NotApplicableError) Unwrap() error { return ErrNotApplicable }

func taskAction(action string) bool {
	return action == tasks.ActionRun || action == tasks.ActionRetry || action == tasks.ActionArchive || action == tasks.ActionDelete
}

// ManageTask appends the request of action on the task t, as read from
// asynq a moment ago.
func (m *Manager) ManageTask(ctx context.Context, action string, t taskview.TaskInfo, md events.Metadata) (Appended, error) {
	if !taskAction(action) {
		return Appended{}, ErrInvalidAction
	}
	if !slices.Contains(tasks.ActionFrom(action), t.State) {
		return Appended{}, &NotApplicableError{Action: action, State: t.State}
	}
	now := m.now().UTC()
	ev := tasks.TaskActionRequested{Queue: t.Queue, TaskID: t.ID, Type: t.Type, State: t.State, Retried: t.Retried, Action: action, At: now}
	return m.append(ctx, tasks.QueueStream(t.Queue), ev, md, now)
}

// ManageTasks appends the request of action on every task of queue in
// state; queue is one asynq knows (configured or seen), known says so.
func (m *Manager) ManageTasks(ctx context.Context, action, queue, state string, known bool, md events.Metadata) (Appended, error) {
	if !taskAction(action) {
		return Appended{}, ErrInvalidAction
	}
	if !slices.Contains(tasks.TaskStates(), state) {
		return Appended{}, taskview.ErrBadState
	}
	if !slices.Contains(tasks.ActionFrom(action), state) {
		return Appended{}, &NotApplicableError{Action: action, State: state}
	}
	if !known && !m.cfg.HasQueue(queue) {
		return Appended{}, ErrUnknownQueue
	}
	now := m.now().UTC()
	ev := tasks.TasksBulkRequested{Queue: queue, State: state, Action: action, At: now}
	return m.append(ctx, tasks.QueueStream(queue), ev, md, now)
}

// TaskResult is a task once an action on it was carried out; Task is nil
// when the task is gone (deleted).
type TaskResult struct {
	Task *taskview.TaskInfo
}

// ManageTask reads task id (of queue, or wherever it is when queue is
// empty), appends the action and waits until the reactor carried it out.
// taskview.ErrTaskNotFound when asynq does not know the task.
func (a *App) ManageTask(ctx context.Context, action, queue, id string, md events.Metadata) (TaskResult, Appended, error) {
	if !taskAction(action) {
		return TaskResult{}, Appended{}, ErrInvalidAction
	}
	t, err := a.Reader.Task(ctx, queue, id)
	if err != nil {
		return TaskResult{}, Appended{}, err
	}
	ap, err := a.Manager.ManageTask(ctx, action, t, md)
	if err != nil {
		return TaskResult{}, ap, err
	}
	if err := a.wait(ctx, ap); err != nil {
		return TaskResult{}, ap, err
	}
	now, err := a.Reader.Task(ctx, t.Queue, id)
	if errors.Is(err, taskview.ErrTaskNotFound) {
		return TaskResult{}, ap, nil
	}
	if err != nil {
		return TaskResult{}, ap, err
	}
	return TaskResult{Task: &now}, ap, nil
}

// BulkResult is how many tasks a bulk action affected.
type BulkResult struct {
	Affected int
}

// ManageTasks appends the bulk action and waits until the reactor carried
// it out.
func (a *App) ManageTasks(ctx context.Context, action, queue, state string, md events.Metadata) (BulkResult, Appended, error) {
	if !taskAction(action) {
		return BulkResult{}, Appended{}, ErrInvalidAction
	}
	known := false
	if !a.Config.HasQueue(queue) && ValidName(queue) {
		qs, err := a.Inspector.Queues()
		if err != nil {
			return BulkResult{}, Appended{}, fmt.Errorf("queues: %w", err)
		}
		known = slices.Contains(qs, queue)
	}
	ap, err := a.Manager.ManageTasks(ctx, action, queue, state, known, md)
	if err != nil {
		return BulkResult{}, ap, err
	}
	if err := a.wait(ctx, ap); err != nil {
		return BulkResult{}, ap, err
	}
	var n int
	err = a.pool.QueryRow(ctx, `SELECT (data->>'affected')::int FROM events WHERE event_id = $1`, tasks.BulkAppliedID(ap.EventID)).Scan(&n)
	if err != nil {
		return BulkResult{}, ap, fmt.Errorf("bulk outcome: %w", err)
	}
	return BulkResult{Affected: n}, ap, nil
}

// wait waits up to ApplyWait for the command at ap to be carried out;
// ErrNotYetApplied when that takes longer.
func (a *App) wait(ctx context.Context, ap Appended) error {
	if a.Stored != nil {
		a.Stored(ctx)
	}
	wctx, cancel := context.WithTimeout(ctx, a.Config.ApplyWait)
	defer cancel()
	if err := a.waitApplied(wctx, ap); err != nil {
		if ctx.Err() == nil {
			return ErrNotYetApplied
		}
		return err
	}
	a.Reader.Invalidate()
	return nil
}
