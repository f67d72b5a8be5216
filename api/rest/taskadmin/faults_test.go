package taskadmin_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/api/rest/taskadmin"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/reactors"
)

// deadLetters are the dead letters of the stack's pipeline so far.
func (s *stack) deadLetters(t *testing.T) []kafka.DeadLetter {
	t.Helper()
	ctx := context.Background()
	if err := kafka.EnsureTopics(ctx, s.Bus, testenv.Quiet(), kafka.TopicDeadLetters); err != nil {
		t.Fatal(err)
	}
	dls, err := kafka.ReadDeadLetters(ctx, s.Bus, kafka.TopicDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	return dls
}

// A pause that meets Redis read-only, then stopped, is carried out once
// Redis is back: the reactor waits for Redis (as for Kafka) instead of
// giving up on the event, which the runner would dead-letter after a few
// attempts while the API and the read model said paused and workers kept
// taking the queue's tasks.
func TestPauseWithRedisStopped(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	// Short dial and pool waits: the stopped server answers fast.
	opts.DialTimeout, opts.PoolTimeout = 200*time.Millisecond, 500*time.Millisecond
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	s := startStackWith(t, stackOpts{redis: rdb, tune: func(c *taskqueues.Config) { c.ApplyWait = time.Second }})
	q := s.Q["default"]
	s.enqueue(t, q, taskqueues.TypeEcho, `{}`)
	// A failover: the primary turns replica and refuses writes
	// (READONLY), then stops, and comes back as the primary.
	if err := rdb.Do(context.Background(), "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	res := s.Do(t, "POST", taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": q}, s.Admin...)
	if res.Status != 202 {
		t.Fatalf("pause with Redis read-only: %d %s, want 202 (accepted, not applied yet)", res.Status, res.Raw)
	}
	// Longer than the runner tries one event that fails (3 batch and 5
	// single attempts, about 2s of backoff).
	time.Sleep(4 * time.Second)
	srv.Stop()
	time.Sleep(time.Second)
	srv.Start()
	paused := func() bool {
		n, err := rdb.Exists(context.Background(), "asynq:{"+q+"}:paused").Result()
		return err == nil && n == 1
	}
	s.eventually(t, 20*time.Second, "asynq has the queue paused", paused)
	s.eventually(t, 10*time.Second, "the reactor passed the pause", func() bool {
		var v int64
		_ = s.Pool.QueryRow(context.Background(), `SELECT version FROM projection_checkpoints WHERE projection = $1 AND stream_id = $2`,
			reactors.ControlName, tasks.QueueStream(q)).Scan(&v)
		return v >= 1
	})
	if dls := s.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters: %+v", dls)
	}
}

// A second pause of a paused queue is carried out as a no-op, not
// dead-lettered (asynq answers "already paused").
func TestSecondPauseIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	q := s.Q["high"]
	s.manage(t, taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": q})
	s.manage(t, taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": q})
	if got := s.queue(t, q); got["is_paused"] != true {
		t.Fatalf("after two pauses: %v", got)
	}
	if dls := s.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters: %+v", dls)
	}
}

// cutOff is asynq's inspector until cut deletes happened; then the
// process "dies": ctx is cancelled and every call fails.
type cutOff struct {
	*asynq.Inspector
	cut     int64
	deleted atomic.Int64
	cancel  context.CancelFunc
}

var errCut = errors.New("the process was killed")

func (c *cutOff) DeleteTask(queue, id string) error {
	if c.deleted.Load() >= c.cut {
		c.cancel()
		return errCut
	}
	if err := c.Inspector.DeleteTask(queue, id); err != nil {
		return err
	}
	c.deleted.Add(1)
	return nil
}

func (c *cutOff) ListPendingTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error) {
	if c.deleted.Load() >= c.cut {
		c.cancel()
		return nil, errCut
	}
	return c.Inspector.ListPendingTasks(queue, opts...)
}

// A clear cut off after deleting some of the waiting tasks (a crash
// before their lifecycle records were published), then delivered again,
// closes every task it removed: none stays pending in the statistics.
func TestClearInterruptedHalfway(t *testing.T) {
	t.Parallel()
	s := startStackWith(t, stackOpts{noControl: true})
	q := s.Q["low"]
	const n = 6
	for range n {
		s.enqueue(t, q, taskqueues.TypeEcho, `{}`)
	}
	s.eventually(t, 10*time.Second, "the tasks are counted", func() bool { return num(s.stats(t)["pending_tasks"]) == n })
	ap, err := s.App.Manager.ManageQueue(context.Background(), tasks.ActionClear, q, events.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	var env events.Envelope
	if err := s.Pool.QueryRow(context.Background(), `SELECT event_id, stream_id, stream_version, position, type, occurred_at, metadata, data
		FROM events WHERE stream_id = $1 AND stream_version = $2`, ap.Stream, ap.Version).
		Scan(&env.ID, &env.Stream, &env.Version, &env.Position, &env.Type, &env.OccurredAt, &env.Metadata, &env.Data); err != nil {
		t.Fatal(err)
	}
	reg, err := events.NewRegistry(tasks.Events()...)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := tasks.NewProducer(s.Bus, testenv.Signer(t), testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	ctx, cancel := context.WithCancel(context.Background())
	cut := &cutOff{Inspector: s.App.Inspector, cut: 2, cancel: cancel}
	if _, err := projections.Apply(ctx, s.Pool, reg, reactors.Control(cut, s.App.Registry, pub, s.Pool), env); err == nil {
		t.Fatal("the cut-off clear succeeded")
	}
	if cut.deleted.Load() != 2 {
		t.Fatalf("%d tasks deleted before the cut, want 2", cut.deleted.Load())
	}
	// The clear is delivered again after the restart.
	if out, err := projections.Apply(context.Background(), s.Pool, reg, reactors.Control(s.App.Inspector, s.App.Registry, pub, s.Pool), env); err != nil || out != projections.Applied {
		t.Fatalf("redelivery: %v %v", out, err)
	}
	s.eventually(t, 20*time.Second, "every task is closed", func() bool {
		st := s.stats(t)
		return num(st["cleared_tasks"]) == n && num(st["pending_tasks"]) == 0
	})
	var removed int
	if err := s.Pool.QueryRow(context.Background(), `SELECT (data->>'removed')::int FROM events WHERE event_id = $1`, tasks.ClearAppliedID(env.ID)).Scan(&removed); err != nil || removed != n {
		t.Fatalf("clear outcome: removed %d (%v), want %d", removed, err, n)
	}
}

// A worker command that meets Redis read-only is left for the worker
// once Redis takes writes again, not dead-lettered.
func TestWorkerCommandWithRedisReadOnly(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	s := startStackWith(t, stackOpts{redis: rdb, tune: func(c *taskqueues.Config) { c.ApplyWait = time.Second }})
	ctx := context.Background()
	// A live worker, as its heartbeat shows it (one that lives a minute:
	// the stack's beats expire after 600ms).
	const id = "w-ro"
	if err := taskqueues.NewRegistry(rdb, s.Cfg.KeyPrefix, time.Minute).Beat(ctx, tasks.WorkerState{WorkerID: id, State: tasks.WorkerRunning}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	res := s.Do(t, "POST", taskadmin.PathWorkerManage, map[string]any{"action": "stop", "worker_id": id}, s.Admin...)
	if res.Status != 202 {
		t.Fatalf("stop with Redis read-only: %d %s, want 202", res.Status, res.Raw)
	}
	time.Sleep(4 * time.Second) // longer than the runner tries one failing event
	if err := rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	s.eventually(t, 20*time.Second, "the worker has its command", func() bool {
		c, ok, err := s.App.Registry.PendingCommand(ctx, id)
		return err == nil && ok && c.Action == tasks.ActionStop
	})
	if dls := s.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters: %+v", dls)
	}
}
