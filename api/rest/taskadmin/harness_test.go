package taskadmin_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"testing"
	"time"

	"github.com/cfgd/cfgd/projections/projectors"
	"github.com/cfgd/cfgd/projections/reactors"

	"github.com/gorilla/mux"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/api/rest/taskadmin"
	"github.com/cfgd/cfgd/api/worker"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections/sinks"
)

// stack is the task capability for one test: the sign-in stack with the
// real pipeline (relay, identity projections, tasks.control reactor,
// tasks.queues views) on a private broker, the lifecycle sink, the task
// endpoints and dashboard, and the local Redis. Queue names and cfgd's Redis keys carry a random
// prefix, and everything the test put in Redis is deleted at the end.
type stack struct {
	*authtest.Env
	Cfg   taskqueues.Config
	App   *taskqueues.App
	Bus   kafka.Config
	Emit  *tasks.Producer
	Admin []string // Authorization header pair of a staff superuser
	Email string
	Pass  string
	Q     map[string]string // short name (default, high, low) -> queue name
	// TR is the Redis of the task queues: the local one, or the test's
	// own server (stackOpts.redis).
	TR *redis.Client
}

// stackOpts varies the stack: tune the config, put the task queues on
// another Redis, leave the tasks.control reactor out (the test runs it
// by hand).
type stackOpts struct {
	tune      func(*taskqueues.Config)
	redis     *redis.Client
	noControl bool
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func startStack(t *testing.T, tune func(*taskqueues.Config)) *stack {
	t.Helper()
	return startStackWith(t, stackOpts{tune: tune})
}

func startStackWith(t *testing.T, o stackOpts) *stack {
	t.Helper()
	tune := o.tune
	env := authtest.Start(t, authtest.Options{NoPipeline: true})
	tr := env.Redis
	if o.redis != nil {
		tr = o.redis
	}
	prefix := "t" + randomHex(4) + "-"
	cfg := taskqueues.DefaultConfig()
	cfg.RedisURL = authtest.RedisURL()
	cfg.Queues = []taskqueues.Queue{{Name: prefix + "default", Priority: 3}, {Name: prefix + "high", Priority: 6}, {Name: prefix + "low", Priority: 1}}
	cfg.KeyPrefix = "cfgd-test:" + prefix
	cfg.Heartbeat = 200 * time.Millisecond
	cfg.CommandPoll = 50 * time.Millisecond
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.SnapshotTTL = 100 * time.Millisecond
	cfg.ApplyWait = 20 * time.Second
	cfg.RetryDelay = 100 * time.Millisecond
	cfg.MaxRetries = 1
	if tune != nil {
		tune(&cfg)
	}
	app, err := taskqueues.New(cfg, taskqueues.Deps{Pool: env.Pool, Redis: tr, Log: testenv.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	t.Cleanup(func() { cleanRedis(t, tr, cfg) })

	busCfg := testenv.Kafka(t, 3)
	reg, err := events.NewRegistry(append(identity.Events(), tasks.Events()...)...)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := tasks.NewProducer(busCfg, testenv.Signer(t), testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	ps := append(projectors.Identity(), projectors.TaskQueues())
	if !o.noControl {
		ps = append(ps, reactors.Control(app.Inspector, app.Registry, pub, env.Pool))
	}
	testenv.Pipeline(t, env.Pool, nil, busCfg, reg, ps...)

	sink := sinks.NewLifecycle(env.Pool, busCfg, testenv.Signer(t), testenv.Quiet())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := sink.Run(ctx); err != nil {
			t.Errorf("sink: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	em, err := tasks.NewProducer(busCfg, testenv.Signer(t), testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = em.Close() })
	// The enqueuer the tests use records what it enqueues, as the CLI does.
	app.Enqueuer = taskqueues.NewEnqueuer(cfg, tr, em)

	staff := env.API.Staff()
	// The authtest router serves the shared assets already (front module).
	assets, err := pages.NewAssets()
	if err != nil {
		t.Fatal(err)
	}
	served := env.WithRoutes(t, func(r *mux.Router) {
		taskadmin.Mount(r, staff, app)
		mon, err := taskadmin.MountAsynqmon(r, staff, cfg.RedisURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mon.Close() })
		if err := pages.MountTaskDashboard(r, staff, assets); err != nil {
			t.Fatal(err)
		}
	})
	email, pass := authtest.Email("staff"), "s3cret-passw0rd"
	served.Superuser(t, email, pass)
	return &stack{
		Env: served, Cfg: cfg, App: app, Bus: busCfg, Emit: em, Email: email, Pass: pass,
		Admin: []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(email+":"+pass))},
		Q:     map[string]string{"default": prefix + "default", "high": prefix + "high", "low": prefix + "low"},
		TR:    tr,
	}
}

// cleanRedis deletes the test's queues and keys.
func cleanRedis(t *testing.T, rdb *redis.Client, cfg taskqueues.Config) {
	insp := asynq.NewInspectorFromRedisClient(rdb)
	for _, q := range cfg.QueueNames() {
		_ = insp.UnpauseQueue(q)
		_ = insp.DeleteQueue(q, true)
	}
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, cfg.KeyPrefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		_ = rdb.Del(ctx, iter.Val()).Err()
	}
}

// startWorker runs a worker process in-process until the test ends.
func (s *stack) startWorker(t *testing.T, id string) *worker.Worker {
	t.Helper()
	return s.startWorkerWith(t, id, worker.Handlers(testenv.Quiet()))
}

func (s *stack) startWorkerWith(t *testing.T, id string, h asynq.Handler) *worker.Worker {
	t.Helper()
	cfg := s.Cfg
	cfg.WorkerID = id
	w, err := worker.NewWorker(cfg, s.TR, s.Emit, testenv.Quiet(), h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Errorf("worker %s: %v", id, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	s.eventually(t, 10*time.Second, "worker "+id+" is live", func() bool {
		st, err := s.App.Registry.Get(context.Background(), id)
		return err == nil && st != nil && st.State == tasks.WorkerRunning
	})
	return w
}

func (s *stack) enqueue(t *testing.T, queue, typ, payload string) string {
	t.Helper()
	id, err := s.App.Enqueuer.Enqueue(context.Background(), queue, typ, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (s *stack) eventually(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// queue returns one row of queue-status.
func (s *stack) queue(t *testing.T, name string) map[string]any {
	t.Helper()
	res := s.Do(t, "GET", taskadmin.PathQueueStatus, nil, s.Admin...)
	if res.Status != 200 {
		t.Fatalf("queue-status: %d %s", res.Status, res.Raw)
	}
	qs, _ := res.Body["queues"].([]any)
	for _, q := range qs {
		m := q.(map[string]any)
		if m["name"] == name {
			return m
		}
	}
	t.Fatalf("queue %s not in queue-status: %s", name, res.Raw)
	return nil
}

func (s *stack) stats(t *testing.T) map[string]any {
	t.Helper()
	res := s.Do(t, "GET", taskadmin.PathTaskStatistics, nil, s.Admin...)
	if res.Status != 200 {
		t.Fatalf("task-statistics: %d %s", res.Status, res.Raw)
	}
	return res.Body
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}
