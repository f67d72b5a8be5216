package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/deploy/clip"
	"github.com/cfgd/cfgd/deploy/process"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/events/tasks"
)

// Recorder receives lifecycle records; *tasks.Producer is one. Emit
// queues a record without waiting; PublishLifecycle returns once the
// broker has the records.
type Recorder interface {
	Emit(ctx context.Context, rec tasks.Lifecycle)
	PublishLifecycle(ctx context.Context, recs []tasks.Lifecycle) error
}

var (
	_ Recorder            = (*tasks.Producer)(nil)
	_ taskqueues.Recorder = (*tasks.Producer)(nil)
)

// Worker is one worker process: cfg.Processes asynq servers of cfg.Threads
// each over the configured queues, a heartbeat, and a loop that carries out
// the start/stop/restart commands addressed to its id.
type Worker struct {
	cfg     taskqueues.Config
	id      string
	rdb     redis.UniversalClient
	reg     *taskqueues.Registry
	rec     Recorder
	log     *slog.Logger
	handler asynq.Handler
	insp    *asynq.Inspector
	now     func() time.Time

	mu       sync.Mutex
	servers  []*asynq.Server
	state    string
	applied  int64
	restarts int
	started  time.Time
	// stopping is set once the running servers begin to shut down, so
	// that a task whose context the shutdown cancels is not reported as a
	// failed attempt: asynq pushes it back to its queue. Each start gets a
	// new flag, as a cut task's handler may return after the next start.
	stopping *atomic.Bool
	active   atomic.Int64
}

// NewWorker builds a worker; handler runs the tasks (see Handlers).
func NewWorker(cfg taskqueues.Config, rdb redis.UniversalClient, rec Recorder, log *slog.Logger, handler asynq.Handler) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	id := cfg.WorkerID
	if id == "" {
		id = taskqueues.DefaultWorkerID()
	}
	return &Worker{
		cfg: cfg, id: id, rdb: rdb, reg: taskqueues.NewRegistry(rdb, cfg.KeyPrefix, cfg.Heartbeat), rec: rec,
		log: log.With("worker_id", id), handler: handler, insp: asynq.NewInspectorFromRedisClient(rdb), now: time.Now,
	}, nil
}

// ID is the worker's address.
func (w *Worker) ID() string { return w.id }

// Run serves tasks until ctx ends, then lets tasks in flight finish (or
// go back to their queue) and deregisters.
func (w *Worker) Run(ctx context.Context) error {
	w.started = w.now()
	// Commands issued before this process started are history.
	if c, ok, err := w.reg.PendingCommand(ctx, w.id); err == nil && ok {
		w.applied = c.Seq
	}
	if err := w.start(); err != nil {
		return err
	}
	w.log.Info("worker started", "queues", w.cfg.QueueNames(), "processes", w.cfg.Processes, "threads", w.cfg.Threads)
	// Heartbeats run on their own: a stop or restart can take up to
	// ShutdownTimeout, longer than the heartbeat key lives. They go on
	// while the process shuts down, showing it stopped.
	beatCtx, stopBeats := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBeats()
	beatsDone := make(chan struct{})
	go func() {
		defer close(beatsDone)
		w.beat(beatCtx)
		t := time.NewTicker(w.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-beatCtx.Done():
				return
			case <-t.C:
				w.beat(beatCtx)
			}
		}
	}()
	poll := time.NewTicker(w.cfg.CommandPoll)
	defer poll.Stop()
	reconcile := time.NewTicker(reconcileEvery)
	defer reconcile.Stop()
	w.reconcile(ctx)
	for {
		select {
		case <-reconcile.C:
			w.reconcile(ctx)
		case <-ctx.Done():
			w.shutdown()
			stopBeats()
			<-beatsDone
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := w.reg.Remove(cctx, w.id); err != nil {
				w.log.Warn("worker deregister", "err", err)
			}
			w.log.Info("worker stopped")
			return nil
		case <-poll.C:
			if err := w.poll(ctx); err != nil && ctx.Err() == nil {
				w.log.Warn("worker command", "err", err)
			}
		}
	}
}

func (w *Worker) poll(ctx context.Context) error {
	c, ok, err := w.reg.PendingCommand(ctx, w.id)
	if err != nil || !ok {
		return err
	}
	w.mu.Lock()
	seen := c.Seq <= w.applied
	w.mu.Unlock()
	if seen {
		return nil
	}
	w.log.Info("worker command", "action", c.Action, "seq", c.Seq)
	switch c.Action {
	case tasks.ActionStop:
		w.shutdown()
	case tasks.ActionStart:
		if err := w.start(); err != nil {
			return err
		}
	case tasks.ActionRestart:
		w.shutdown()
		if err := w.start(); err != nil {
			return err
		}
		w.mu.Lock()
		w.restarts++
		w.mu.Unlock()
	default:
		w.log.Warn("unknown worker command ignored", "action", c.Action)
	}
	w.mu.Lock()
	w.applied = c.Seq
	w.mu.Unlock()
	w.beat(ctx)
	return nil
}

// start runs the servers unless they run already.
func (w *Worker) start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.servers) > 0 {
		return nil
	}
	stopping := new(atomic.Bool)
	for i := range w.cfg.Processes {
		var delay asynq.RetryDelayFunc
		if d := w.cfg.RetryDelay; d > 0 {
			delay = func(int, error, *asynq.Task) time.Duration { return d }
		}
		srv := asynq.NewServerFromRedisClient(w.rdb, asynq.Config{
			RetryDelayFunc:  delay,
			Concurrency:     w.cfg.Threads,
			Queues:          w.cfg.AsynqQueues(),
			ShutdownTimeout: w.cfg.ShutdownTimeout,
			Logger:          asynqLogger{w.log.With("server", i)},
			LogLevel:        asynq.WarnLevel,
			// Tasks of paused queues wait; the short check keeps resume
			// and new work prompt.
			TaskCheckInterval: 200 * time.Millisecond,
		})
		if err := srv.Start(w.middleware(w.handler, stopping)); err != nil {
			for _, s := range w.servers {
				s.Shutdown()
			}
			w.servers = nil
			return fmt.Errorf("worker %s: start server: %w", w.id, err)
		}
		w.servers = append(w.servers, srv)
	}
	w.stopping = stopping
	w.state = tasks.WorkerRunning
	return nil
}

// shutdown stops every server: tasks in flight get ShutdownTimeout to
// finish, then asynq pushes them back to their queue.
func (w *Worker) shutdown() {
	w.mu.Lock()
	servers, stopping := w.servers, w.stopping
	w.servers = nil
	w.state = tasks.WorkerStopped
	w.mu.Unlock()
	if len(servers) == 0 {
		return
	}
	stopping.Store(true)
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Stop()
			s.Shutdown()
		}()
	}
	wg.Wait()
}

// State is the worker's current heartbeat record.
func (w *Worker) State() tasks.WorkerState {
	w.mu.Lock()
	defer w.mu.Unlock()
	host, _ := os.Hostname()
	return tasks.WorkerState{
		WorkerID: w.id, Host: host, PID: os.Getpid(), State: w.state, Queues: w.cfg.QueueNames(),
		Processes: w.cfg.Processes, Threads: w.cfg.Threads, Active: w.active.Load(),
		StartedAt: w.started.UTC(), HeartbeatAt: w.now().UTC(), AppliedSeq: w.applied, Restarts: w.restarts,
	}
}

func (w *Worker) beat(ctx context.Context) {
	if err := w.reg.Beat(ctx, w.State()); err != nil && ctx.Err() == nil {
		w.log.Warn("worker heartbeat", "err", err)
	}
}

// middleware reports each attempt's lifecycle. The record of an attempt's
// outcome is on the broker before asynq hears of the outcome: a worker
// killed before that leaves the task active in asynq, whose lease expiry
// runs it again (or archives it, see reconcile), so no task is left
// "started" by a record lost in the producer's memory. An attempt after
// the first closes the one before it (retried) when no outcome of that
// one was recorded: asynq's lease recovery writes none.
func (w *Worker) middleware(next asynq.Handler, stopping *atomic.Bool) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		queue, _ := asynq.GetQueueName(ctx)
		retried, _ := asynq.GetRetryCount(ctx)
		maxRetry, _ := asynq.GetMaxRetry(ctx)
		rec := tasks.Lifecycle{TaskID: id, Queue: queue, Type: t.Type(), Attempt: retried + 1, WorkerID: w.id}
		step := func(step string, err error) tasks.Lifecycle {
			r := rec
			r.Step, r.At = step, w.now().UTC()
			if err != nil {
				r.Error = truncate(err.Error(), 500)
			}
			return r
		}
		w.active.Add(1)
		defer w.active.Add(-1)
		start := []tasks.Lifecycle{step(tasks.StepStarted, nil)}
		if retried > 0 {
			// The step key (task, retried, attempt) makes this a no-op when
			// the earlier attempt's own outcome was recorded.
			prev := rec
			prev.Step, prev.Attempt, prev.WorkerID, prev.At = tasks.StepRetried, retried, "", w.now().UTC()
			if info, err := w.insp.GetTaskInfo(queue, id); err == nil {
				prev.Error = truncate(info.LastErr, 500)
				if !info.LastFailedAt.IsZero() {
					prev.At = info.LastFailedAt.UTC()
				}
			}
			start = append([]tasks.Lifecycle{prev}, start...)
		}
		for _, r := range start {
			w.rec.Emit(context.WithoutCancel(ctx), r)
		}
		err := next.ProcessTask(ctx, t)
		switch {
		case err == nil:
			w.publish(ctx, step(tasks.StepSucceeded, nil))
		case ctx.Err() != nil && stopping.Load() && errors.Is(err, context.Canceled):
			// Shutdown: asynq requeues the task; it starts again later.
		case errors.Is(err, asynq.SkipRetry) || retried >= maxRetry:
			w.publish(ctx, step(tasks.StepFailed, err))
		default:
			w.publish(ctx, step(tasks.StepRetried, err))
		}
		return err
	})
}

// publish sends an outcome record and waits for the broker, retrying
// while the broker is away. It gives up only when the task's context ends
// (a shutdown cut it, or its deadline): asynq then requeues the task or
// records the failure itself, and the record goes out without waiting.
func (w *Worker) publish(ctx context.Context, r tasks.Lifecycle) {
	bo := process.Backoff(50*time.Millisecond, 2*time.Second)
	for {
		err := w.rec.PublishLifecycle(context.WithoutCancel(ctx), []tasks.Lifecycle{r})
		if err == nil {
			return
		}
		w.log.Warn("lifecycle record not stored yet", "task_id", r.TaskID, "step", r.Step, "err", err)
		if !process.Wait(ctx, bo) {
			w.rec.Emit(context.WithoutCancel(ctx), r)
			return
		}
	}
}

// reconcileEvery is how often a worker looks for tasks asynq archived
// after their lease expired (a worker killed on a task's last attempt).
const reconcileEvery = 30 * time.Second

// reconcile records a failed step for every task of the worker's queues
// that asynq archived because its lease expired: no handler ran to say
// so, and without it the task would stay "started" in the statistics.
// The step key makes a record produced twice (by every worker, at every
// round) one step.
func (w *Worker) reconcile(ctx context.Context) {
	for _, q := range w.cfg.QueueNames() {
		for page := 1; ; page++ {
			ts, err := w.insp.ListArchivedTasks(q, asynq.PageSize(500), asynq.Page(page))
			if errors.Is(err, asynq.ErrQueueNotFound) {
				break
			}
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("lifecycle reconcile", "queue", q, "err", err)
				}
				return
			}
			var recs []tasks.Lifecycle
			for _, t := range ts {
				if t.LastErr != asynq.ErrLeaseExpired.Error() {
					continue
				}
				recs = append(recs, tasks.Lifecycle{TaskID: t.ID, Queue: q, Type: t.Type, Step: tasks.StepFailed,
					Attempt: t.Retried + 1, Error: t.LastErr, At: t.LastFailedAt.UTC()})
			}
			if err := w.rec.PublishLifecycle(ctx, recs); err != nil {
				if ctx.Err() == nil {
					w.log.Warn("lifecycle reconcile", "queue", q, "err", err)
				}
				return
			}
			if len(ts) < 500 {
				break
			}
		}
	}
}

func truncate(s string, n int) string { return clip.To(s, n) }

// asynqLogger routes asynq's logs into slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)) }
