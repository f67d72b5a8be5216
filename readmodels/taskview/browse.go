package taskview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events/tasks"
)

// Browser is what listing a queue's tasks needs of asynq: the live state,
// read like the snapshot (the lifecycle view has no payloads).
type Browser interface {
	Queues() ([]string, error)
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	ListPendingTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	ListActiveTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	ListScheduledTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	ListRetryTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	ListArchivedTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	ListCompletedTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
}

// ErrTaskNotFound is a task id asynq does not know (any more).
var ErrTaskNotFound = errors.New("task not found")

// ErrBadState is a state that tasks are not listed by.
var ErrBadState = errors.New("unknown task state")

// MaxTasksPage bounds one listing.
const MaxTasksPage = 100

// TaskInfo is one task as asynq holds it now, with the actions that make
// sense in its state.
type TaskInfo struct {
	ID      string `json:"id"`
	Queue   string `json:"queue"`
	Type    string `json:"type"`
	State   string `json:"state"`
	Payload string `json:"payload"`
	// PayloadJSON is the payload when it is JSON, so a client need not
	// parse a string.
	PayloadJSON   json.RawMessage `json:"payload_json,omitempty"`
	LastError     string          `json:"last_error"`
	Retried       int             `json:"retried"`
	MaxRetry      int             `json:"max_retry"`
	LastFailedAt  *time.Time      `json:"last_failed_at"`
	NextProcessAt *time.Time      `json:"next_process_at"`
	CompletedAt   *time.Time      `json:"completed_at"`
	Actions       []string        `json:"actions"`
}

// Actions lists the task actions that make sense for a task in state.
func Actions(state string) []string {
	out := []string{}
	for _, a := range []string{tasks.ActionRun, tasks.ActionArchive, tasks.ActionDelete} {
		if slices.Contains(tasks.ActionFrom(a), state) {
			out = append(out, a)
		}
	}
	return out
}

func when(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// Info converts asynq's view of a task.
func Info(t *asynq.TaskInfo) TaskInfo {
	state := t.State.String()
	out := TaskInfo{ID: t.ID, Queue: t.Queue, Type: t.Type, State: state, Payload: string(t.Payload),
		LastError: t.LastErr, Retried: t.Retried, MaxRetry: t.MaxRetry,
		LastFailedAt: when(t.LastFailedAt), NextProcessAt: when(t.NextProcessAt), CompletedAt: when(t.CompletedAt),
		Actions: Actions(state)}
	if len(t.Payload) > 0 && json.Valid(t.Payload) {
		out.PayloadJSON = json.RawMessage(t.Payload)
	}
	return out
}

// Tasks lists page (1-based) of queue's tasks in state, size at most
// MaxTasksPage. A queue asynq has never seen has no tasks.
func (r *Reader) Tasks(queue, state string, page, size int) ([]TaskInfo, error) {
	b := r.browser
	lists := map[string]func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
		tasks.StatePending: b.ListPendingTasks, tasks.StateActive: b.ListActiveTasks,
		tasks.StateScheduled: b.ListScheduledTasks, tasks.StateRetry: b.ListRetryTasks,
		tasks.StateArchived: b.ListArchivedTasks, tasks.StateCompleted: b.ListCompletedTasks,
	}
	list, ok := lists[state]
	if !ok {
		return nil, ErrBadState
	}
	known, err := b.Queues()
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	out := []TaskInfo{}
	if !slices.Contains(known, queue) {
		return out, nil
	}
	ts, err := list(queue, asynq.Page(page), asynq.PageSize(min(max(size, 1), MaxTasksPage)))
	if err != nil {
		return nil, fmt.Errorf("%s tasks of %s: %w", state, queue, err)
	}
	for _, t := range ts {
		out = append(out, Info(t))
	}
	return out, nil
}

// Task returns one task. With queue empty, the task's queue is the one
// its lifecycle records name, else each queue asynq knows is asked.
func (r *Reader) Task(ctx context.Context, queue, id string) (TaskInfo, error) {
	queues := []string{queue}
	if queue == "" {
		var q string
		err := r.db.QueryRow(ctx, `SELECT queue FROM task_runs WHERE task_id = $1`, id).Scan(&q)
		switch {
		case err == nil:
			queues = []string{q}
		case errors.Is(err, pgx.ErrNoRows):
			known, err := r.browser.Queues()
			if err != nil {
				return TaskInfo{}, fmt.Errorf("queues: %w", err)
			}
			queues = known
		default:
			return TaskInfo{}, fmt.Errorf("task %s: %w", id, err)
		}
	}
	for _, q := range queues {
		t, err := r.browser.GetTaskInfo(q, id)
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			continue
		}
		if err != nil {
			return TaskInfo{}, fmt.Errorf("task %s: %w", id, err)
		}
		return Info(t), nil
	}
	return TaskInfo{}, ErrTaskNotFound
}

// Point is one minute of task runs: attempts that ended, and those that
// failed (retried or failed for good).
type Point struct {
	At        time.Time `json:"at"`
	Processed int64     `json:"processed"`
	Failed    int64     `json:"failed"`
}

// MaxHistory bounds the history, in minutes.
const MaxHistory = 24 * 60

// History counts the attempts that ended in each of the last minutes
// minutes, oldest first, from the lifecycle view; minutes without any
// are left out.
func (r *Reader) History(ctx context.Context, minutes int) ([]Point, error) {
	rows, err := r.db.Query(ctx, historySQL, minutes)
	if err != nil {
		return nil, fmt.Errorf("task history: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Point, error) {
		var p Point
		err := row.Scan(&p.At, &p.Processed, &p.Failed)
		p.At = p.At.UTC()
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("task history: %w", err)
	}
	if out == nil {
		out = []Point{}
	}
	return out, nil
}

const historySQL = `
	SELECT date_trunc('minute', at) AS m,
	count(*),
	count(*) FILTER (WHERE step IN ('retried', 'failed'))
	FROM task_lifecycle
	WHERE step IN ('succeeded', 'retried', 'failed') AND at >= date_trunc('minute', now()) - make_interval(mins => $1 - 1)
	GROUP BY m ORDER BY m`

// Current is a task a worker is running, as its lifecycle records say.
type Current struct {
	ID        string    `json:"id"`
	Queue     string    `json:"queue"`
	Type      string    `json:"type"`
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
}

// current returns the tasks each worker of ids started and has not
// finished.
func (r *Reader) current(ctx context.Context, ids []string) (map[string][]Current, error) {
	rows, err := r.db.Query(ctx, `SELECT worker_id, task_id, queue, type, attempts, updated_at FROM task_runs
		WHERE state = 'started' AND worker_id = ANY($1) ORDER BY updated_at, task_id`, ids)
	if err != nil {
		return nil, fmt.Errorf("current tasks: %w", err)
	}
	out := map[string][]Current{}
	var w string
	var c Current
	if _, err := pgx.ForEachRow(rows, []any{&w, &c.ID, &c.Queue, &c.Type, &c.Attempt, &c.StartedAt}, func() error {
		c.StartedAt = c.StartedAt.UTC()
		out[w] = append(out[w], c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("current tasks: %w", err)
	}
	return out, nil
}
