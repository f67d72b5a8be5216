package taskqueues

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/readmodels/checkpoints"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// Deps are the connections the core runs on.
type Deps struct {
	Pool *pgxpool.Pool
	// Events sets the limits of every append; nil: the store's defaults.
	Events *store.Store
	Redis  redis.UniversalClient
	// Recorder receives the enqueued records; nil: none are recorded.
	Recorder Recorder
	Log      *slog.Logger
	Now      func() time.Time
}

// App is the task capability's core: HTTP handlers, the CLI and tests all
// go through it.
type App struct {
	Config    Config
	Manager   *Manager
	Registry  *Registry
	Inspector *asynq.Inspector
	Reader    *taskview.Reader
	Enqueuer  *Enqueuer
	// Stored, when set, runs once a task command's event is stored and
	// before the wait for its effect: the CLI wakes the running server's
	// relay with it.
	Stored func(ctx context.Context)
	pool   *pgxpool.Pool
	log    *slog.Logger
}

// New builds the core.
func New(cfg Config, d Deps) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Recorder == nil {
		d.Recorder = discard{}
	}
	reg := NewRegistry(d.Redis, cfg.KeyPrefix, cfg.Heartbeat)
	insp := asynq.NewInspectorFromRedisClient(d.Redis)
	return &App{
		Config: cfg, Registry: reg, Inspector: insp,
		Manager:  NewManager(bindEvents(d), cfg, reg, d.Now),
		Reader:   taskview.NewReader(d.Pool, insp, reg, cfg.QueueNames(), cfg.SnapshotTTL),
		Enqueuer: NewEnqueuer(cfg, d.Redis, d.Recorder),
		pool:     d.Pool, log: d.Log,
	}, nil
}

type discard struct{}

func (discard) Emit(context.Context, tasks.Lifecycle) {}

// ErrNotYetApplied means the command is stored but its effect was not seen
// within Config.ApplyWait; it will still be carried out.
var ErrNotYetApplied = errors.New("accepted, not applied yet")

// ManageQueue appends the command and waits until the reactor carried it
// out, then returns the queue's new state. ErrNotYetApplied (with the
// appended position) when that takes longer than ApplyWait.
func (a *App) ManageQueue(ctx context.Context, action, queue string, md events.Metadata) (taskview.Queue, Appended, error) {
	ap, err := a.Manager.ManageQueue(ctx, action, queue, md)
	if err != nil {
		return taskview.Queue{}, ap, err
	}
	wctx, cancel := context.WithTimeout(ctx, a.Config.ApplyWait)
	defer cancel()
	if err := a.waitApplied(wctx, ap); err != nil {
		if ctx.Err() == nil {
			return taskview.Queue{}, ap, ErrNotYetApplied
		}
		return taskview.Queue{}, ap, err
	}
	a.Reader.Invalidate()
	qs, err := a.Reader.QueueStatus(ctx)
	if err != nil {
		return taskview.Queue{}, ap, err
	}
	for _, q := range qs {
		if q.Name == queue {
			return q, ap, nil
		}
	}
	return taskview.Queue{}, ap, fmt.Errorf("queue %s vanished from the configuration", queue)
}

// ManageWorker appends the command and waits until the worker reports it
// carried it out, then returns the worker's new state.
func (a *App) ManageWorker(ctx context.Context, action, id string, md events.Metadata) (tasks.WorkerState, Appended, error) {
	ap, err := a.Manager.ManageWorker(ctx, action, id, md)
	if err != nil {
		return tasks.WorkerState{}, ap, err
	}
	wctx, cancel := context.WithTimeout(ctx, a.Config.ApplyWait)
	defer cancel()
	if err := a.waitApplied(wctx, ap); err != nil {
		if ctx.Err() == nil {
			return tasks.WorkerState{}, ap, ErrNotYetApplied
		}
		return tasks.WorkerState{}, ap, err
	}
	bo := process.Backoff(20*time.Millisecond, 200*time.Millisecond)
	for {
		s, err := a.Registry.Get(wctx, id)
		if err != nil && wctx.Err() == nil {
			return tasks.WorkerState{}, ap, err
		}
		if s != nil && s.AppliedSeq >= ap.Version {
			a.Reader.Invalidate()
			return *s, ap, nil
		}
		if !process.Wait(wctx, bo) {
			if ctx.Err() != nil {
				return tasks.WorkerState{}, ap, ctx.Err()
			}
			return tasks.WorkerState{}, ap, ErrNotYetApplied
		}
	}
}

// Close releases the inspector and the enqueuer (not the shared Redis
// client).
func (a *App) Close() error {
	return errors.Join(a.Inspector.Close(), a.Enqueuer.Close())
}

func bindEvents(d Deps) store.DB {
	if d.Events != nil {
		return d.Events.Bind(d.Pool)
	}
	return d.Pool
}

// waitApplied waits until the reactor carried out the command at ap and
// the task views show it.
func (a *App) waitApplied(ctx context.Context, ap Appended) error {
	for _, name := range []string{tasks.ControlReactor, taskview.QueuesProjection} {
		if err := checkpoints.Wait(ctx, a.pool, name, ap.Stream, ap.Version); err != nil {
			return err
		}
	}
	return nil
}
