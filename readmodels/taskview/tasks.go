package taskview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events/tasks"
)

// DB is what the queries need of Postgres.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Inspector is what the live snapshot and the task listings need of
// asynq.
type Inspector interface {
	Browser
	GetQueueInfo(queue string) (*asynq.QueueInfo, error)
}

// Workers lists the live workers.
type Workers interface {
	Live(ctx context.Context) ([]tasks.WorkerState, error)
}

// Reader answers the queries.
type Reader struct {
	db      DB
	insp    Inspector
	workers Workers
	queues  []string
	ttl     time.Duration
	now     func() time.Time

	mu     sync.Mutex
	cached *Snapshot
	// browser is insp, named for the listings.
	browser Browser
}

// NewReader returns the queries over the configured queues; the live
// snapshot is reused for ttl.
func NewReader(db DB, insp Inspector, workers Workers, queues []string, ttl time.Duration) *Reader {
	return &Reader{db: db, insp: insp, browser: insp, workers: workers, queues: queues, ttl: ttl, now: time.Now}
}

// Sizes of one queue in Redis.
type Sizes struct {
	Pending, Scheduled, Retry, Active, Completed, Archived int
	// Paused is asynq's own flag, for the dashboard's detail.
	Paused bool
}

// Snapshot is the live state in Redis at one moment.
type Snapshot struct {
	At     time.Time
	Queues map[string]Sizes
	// Seen are the queues asynq knows that are not configured (tasks
	// left from an earlier configuration, or another producer's), sorted.
	Seen    []string
	Workers []tasks.WorkerState
}

// Live returns the snapshot, taking a fresh one when the cached one is
// older than the ttl. One caller refreshes; the others wait for it.
func (r *Reader) Live(ctx context.Context) (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cached != nil && r.now().Sub(r.cached.At) < r.ttl {
		return r.cached, nil
	}
	s := &Snapshot{At: r.now(), Queues: make(map[string]Sizes, len(r.queues))}
	// asynq knows a queue once something was enqueued on it; asking about
	// any other is an error, so ask only about those it knows.
	known, err := r.insp.Queues()
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	for _, q := range known {
		if !slices.Contains(r.queues, q) {
			s.Seen = append(s.Seen, q)
		}
	}
	slices.Sort(s.Seen)
	for _, q := range append(slices.Clone(r.queues), s.Seen...) {
		if !slices.Contains(known, q) {
			s.Queues[q] = Sizes{}
			continue
		}
		info, err := r.insp.GetQueueInfo(q)
		if err != nil {
			// asynq's "queue not found" is an internal type: a queue
			// asynq no longer lists was deleted since, and nothing waits
			// there.
			now, lerr := r.insp.Queues()
			if lerr == nil && !slices.Contains(now, q) {
				s.Queues[q] = Sizes{}
				continue
			}
			return nil, fmt.Errorf("queue %s: %w", q, err)
		}
		s.Queues[q] = Sizes{Pending: info.Pending, Scheduled: info.Scheduled, Retry: info.Retry, Active: info.Active,
			Completed: info.Completed, Archived: info.Archived, Paused: info.Paused}
	}
	ws, err := r.workers.Live(ctx)
	if err != nil {
		return nil, err
	}
	s.Workers = ws
	r.cached = s
	return s, nil
}

// Invalidate drops the cached snapshot, after a command changed it.
func (r *Reader) Invalidate() {
	r.mu.Lock()
	r.cached = nil
	r.mu.Unlock()
}

// Queue is one row of queue-status (docs/api.md, task queues) with the dashboard's detail.
type Queue struct {
	Name      string `json:"name"`
	Size      int    `json:"size"`
	IsPaused  bool   `json:"is_paused"`
	Workers   int    `json:"workers"`
	Pending   int    `json:"pending"`
	Scheduled int    `json:"scheduled"`
	Retry     int    `json:"retry"`
	Active    int    `json:"active"`
	Archived  int    `json:"archived"`
	Completed int    `json:"completed"`
	// Configured is false for a queue asynq knows that TASKS__QUEUES does
	// not name (listed only on request): its tasks can be acted on, the
	// queue itself not paused or cleared.
	Configured bool `json:"configured"`
}

// QueueStatus lists every configured queue, in configuration order.
func (r *Reader) QueueStatus(ctx context.Context) ([]Queue, error) {
	return r.queueStatus(ctx, false)
}

// QueueStatusAll lists every configured queue, then every other queue
// asynq knows.
func (r *Reader) QueueStatusAll(ctx context.Context) ([]Queue, error) {
	return r.queueStatus(ctx, true)
}

func (r *Reader) queueStatus(ctx context.Context, seen bool) ([]Queue, error) {
	s, err := r.Live(ctx)
	if err != nil {
		return nil, err
	}
	paused, err := r.paused(ctx)
	if err != nil {
		return nil, err
	}
	names := r.queues
	if seen {
		names = append(slices.Clone(r.queues), s.Seen...)
	}
	out := make([]Queue, 0, len(names))
	for i, name := range names {
		sz := s.Queues[name]
		q := Queue{Name: name, Size: sz.Pending + sz.Scheduled + sz.Retry, IsPaused: paused[name],
			Pending: sz.Pending, Scheduled: sz.Scheduled, Retry: sz.Retry, Active: sz.Active,
			Archived: sz.Archived, Completed: sz.Completed, Configured: i < len(r.queues)}
		if !q.Configured {
			q.IsPaused = sz.Paused
		}
		for _, w := range s.Workers {
			if w.State == tasks.WorkerRunning && slices.Contains(w.Queues, name) {
				q.Workers++
			}
		}
		out = append(out, q)
	}
	return out, nil
}

// paused reads the pause flags the reactor recorded; it is never cached,
// so a pause shows on the very next poll.
func (r *Reader) paused(ctx context.Context) (map[string]bool, error) {
	rows, err := r.db.Query(ctx, `SELECT name, is_paused FROM task_queues WHERE name = ANY($1)`, r.queues)
	if err != nil {
		return nil, fmt.Errorf("queue flags: %w", err)
	}
	out := map[string]bool{}
	var name string
	var p bool
	_, err = pgx.ForEachRow(rows, []any{&name, &p}, func() error {
		out[name] = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue flags: %w", err)
	}
	return out, nil
}

// QueuePaused is the recorded pause flag of one queue and the stream
// version it reflects.
func (r *Reader) QueuePaused(ctx context.Context, name string) (bool, error) {
	var p bool
	err := r.db.QueryRow(ctx, `SELECT is_paused FROM task_queues WHERE name = $1`, name).Scan(&p)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("queue %s: %w", name, err)
	}
	return p, nil
}

// Statistics are counted from the lifecycle read model (docs/api.md, task queues).
type Statistics struct {
	TotalTasks     int64   `json:"total_tasks"`
	CompletedTasks int64   `json:"completed_tasks"`
	FailedTasks    int64   `json:"failed_tasks"`
	PendingTasks   int64   `json:"pending_tasks"`
	ClearedTasks   int64   `json:"cleared_tasks"`
	DeletedTasks   int64   `json:"deleted_tasks"`
	ArchivedTasks  int64   `json:"archived_tasks"`
	SuccessRate    float64 `json:"success_rate"`
}

// Stats counts every task ever seen: completed and failed are final;
// pending is every task not finished yet (waiting, running or waiting for
// a retry); cleared tasks were removed by a queue clear before they ran,
// deleted ones by staff; archived ones wait for staff to run them again.
func (r *Reader) Stats(ctx context.Context) (Statistics, error) {
	var s Statistics
	err := r.db.QueryRow(ctx, taskStats).Scan(&s.TotalTasks, &s.CompletedTasks, &s.FailedTasks, &s.ClearedTasks, &s.DeletedTasks, &s.ArchivedTasks)
	if err != nil {
		return s, fmt.Errorf("task statistics: %w", err)
	}
	s.PendingTasks = s.TotalTasks - s.CompletedTasks - s.FailedTasks - s.ClearedTasks - s.DeletedTasks - s.ArchivedTasks
	if s.TotalTasks > 0 {
		s.SuccessRate = float64(s.CompletedTasks) / float64(s.TotalTasks) * 100
	}
	return s, nil
}

// taskStats counts every task run by its final state.
const taskStats = `
	SELECT count(*),
	count(*) FILTER (WHERE state = 'succeeded'),
	count(*) FILTER (WHERE state = 'failed'),
	count(*) FILTER (WHERE state = 'cleared'),
	count(*) FILTER (WHERE state = 'deleted'),
	count(*) FILTER (WHERE state = 'archived')
	FROM task_runs`

// Task is one row of the recent-tasks list.
type Task struct {
	ID         string     `json:"id"`
	Queue      string     `json:"queue"`
	Type       string     `json:"type"`
	State      string     `json:"state"`
	Attempts   int        `json:"attempts"`
	WorkerID   string     `json:"worker_id"`
	Error      string     `json:"error"`
	EnqueuedAt *time.Time `json:"enqueued_at"`
	FinishedAt *time.Time `json:"finished_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// Recent lists the limit most recently changed tasks.
func (r *Reader) Recent(ctx context.Context, limit int) ([]Task, error) {
	rows, err := r.db.Query(ctx, recentTasks, limit)
	if err != nil {
		return nil, fmt.Errorf("recent tasks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Task, error) {
		var t Task
		err := row.Scan(&t.ID, &t.Queue, &t.Type, &t.State, &t.Attempts, &t.WorkerID, &t.Error, &t.EnqueuedAt, &t.FinishedAt, &t.UpdatedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("recent tasks: %w", err)
	}
	return out, nil
}

// recentTasks are the $1 most recently changed task runs.
const recentTasks = `
	SELECT task_id, queue, type, state, attempts, worker_id, error, enqueued_at, finished_at, updated_at
	FROM task_runs ORDER BY updated_at DESC, task_id LIMIT $1`

// Worker is one row of the workers list.
type Worker struct {
	tasks.WorkerState
	LastCommand string `json:"last_command"`
	// Current are the tasks it runs now.
	Current []Current `json:"current"`
}

// Workers lists the live workers (from the snapshot) with the last
// command each was sent.
func (r *Reader) Workers(ctx context.Context) ([]Worker, error) {
	s, err := r.Live(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Worker, 0, len(s.Workers))
	ids := make([]string, 0, len(s.Workers))
	for _, w := range s.Workers {
		out = append(out, Worker{WorkerState: w})
		ids = append(ids, w.WorkerID)
	}
	rows, err := r.db.Query(ctx, `SELECT worker_id, action FROM task_worker_commands WHERE worker_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("worker commands: %w", err)
	}
	last := map[string]string{}
	var id, action string
	if _, err := pgx.ForEachRow(rows, []any{&id, &action}, func() error { last[id] = action; return nil }); err != nil {
		return nil, fmt.Errorf("worker commands: %w", err)
	}
	cur, err := r.current(ctx, ids)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].LastCommand = last[out[i].WorkerID]
		out[i].Current = cur[out[i].WorkerID]
		if out[i].Current == nil {
			out[i].Current = []Current{}
		}
	}
	return out, nil
}

// QueuesProjection is the projection that fills the queue and task views
// (projections/projectors).
const QueuesProjection = "tasks.queues"
