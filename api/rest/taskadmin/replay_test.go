package taskadmin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/api/rest/taskadmin"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/reactors"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
	"github.com/cfgd/cfgd/readmodels/checkpoints"
)

// manage posts a queue or worker command and fails the test unless it is
// carried out.
func (s *stack) manage(t *testing.T, path string, body map[string]any) {
	t.Helper()
	if res := s.Do(t, "POST", path, body, s.Admin...); res.Status != 200 {
		t.Fatalf("%s %v: %d %s", path, body, res.Status, res.Raw)
	}
}

// views renders every row of the task views and their checkpoints, and
// what the API serves of them: statistics, recent tasks, pause flags and
// the workers' last commands.
func (s *stack) views(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	b.WriteString(testenv.Dump(t, s.Pool,
		`SELECT * FROM task_queues ORDER BY name`,
		`SELECT * FROM task_worker_commands ORDER BY worker_id`,
		`SELECT * FROM task_lifecycle ORDER BY task_id, step, attempt`,
		`SELECT * FROM task_runs ORDER BY task_id`,
		`SELECT * FROM projection_checkpoints WHERE projection = 'tasks.queues' ORDER BY stream_id`,
	))
	st, err := s.App.Reader.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "stats: %+v\n", st)
	recent, err := s.App.Reader.Recent(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recent {
		fmt.Fprintf(&b, "recent: %+v\n", r)
	}
	for _, q := range s.Cfg.QueueNames() {
		p, err := s.App.Reader.QueuePaused(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "paused %s: %v\n", q, p)
	}
	ws, err := s.App.Reader.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		fmt.Fprintf(&b, "worker %s: %s\n", w.WorkerID, w.LastCommand)
	}
	return b.String()
}

// replayViews replays the task views as cfgd replay does; afterRebuild,
// when set, runs once the lifecycle feed read the topic, before the swap.
func (s *stack) replayViews(t *testing.T, afterRebuild func()) replay.Result {
	t.Helper()
	reg, err := events.NewRegistry(append(identity.Events(), tasks.Events()...)...)
	if err != nil {
		t.Fatal(err)
	}
	p := sinks.ViewsWithLifecycle(s.Bus, testenv.Signer(t), nil, testenv.Quiet())
	for i, f := range p.Feeds {
		p.Feeds[i] = hooked{Feed: f, after: afterRebuild}
	}
	res, err := replay.Run(context.Background(), s.Pool, reg, p, replay.Config{BatchSize: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Queue states, worker commands and task statistics built live (a real
// worker runs, fails and retries tasks; queues are paused, cleared and
// resumed; workers get commands) are rebuilt row for row by a replay of
// the task views from the events and the lifecycle topic, and the
// statistics the API serves are the same.
func TestReplayRebuildsTheTaskViews(t *testing.T) {
	t.Parallel()
	s := startStack(t, func(c *taskqueues.Config) { c.Threads = 2 })
	wid := "w-" + randomHex(3)
	s.startWorker(t, wid)
	q, hi := s.Q["default"], s.Q["high"]
	for i := range 4 {
		s.enqueue(t, q, taskqueues.TypeEcho, fmt.Sprintf(`{"n": %d}`, i))
	}
	s.enqueue(t, hi, taskqueues.TypeFail, `{"message": "boom"}`)
	s.eventually(t, 30*time.Second, "the first tasks finish", func() bool {
		st := s.stats(t)
		return num(st["completed_tasks"]) == 4 && num(st["failed_tasks"]) == 1
	})
	// Paused, tasks wait; a clear removes them; a second clear finds none.
	s.manage(t, taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": q})
	for range 3 {
		s.enqueue(t, q, taskqueues.TypeEcho, `{}`)
	}
	s.manage(t, taskadmin.PathQueueManage, map[string]any{"action": "clear", "queue_name": q})
	s.manage(t, taskadmin.PathQueueManage, map[string]any{"action": "clear", "queue_name": q})
	s.manage(t, taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": hi})
	s.manage(t, taskadmin.PathQueueManage, map[string]any{"action": "resume", "queue_name": q})
	s.enqueue(t, q, taskqueues.TypeEcho, `{"after": "resume"}`)
	s.manage(t, taskadmin.PathWorkerManage, map[string]any{"action": "restart", "worker_id": wid})
	s.eventually(t, 30*time.Second, "every task is accounted for", func() bool {
		st := s.stats(t)
		return num(st["completed_tasks"]) == 5 && num(st["cleared_tasks"]) == 3 && num(st["pending_tasks"]) == 0
	})
	var cleared int
	if err := s.Pool.QueryRow(context.Background(), `SELECT coalesce(sum(cleared), 0) FROM task_queues`).Scan(&cleared); err != nil {
		t.Fatal(err)
	}
	s.eventually(t, 10*time.Second, "the clears' counts are recorded", func() bool {
		_ = s.Pool.QueryRow(context.Background(), `SELECT coalesce(sum(cleared), 0) FROM task_queues`).Scan(&cleared)
		return cleared >= 3
	})
	if cleared != 3 {
		t.Fatalf("task_queues counts %d cleared tasks, the statistics 3", cleared)
	}
	before := s.views(t)
	for _, want := range []string{"cleared", "retried", "restart", "paused " + hi + ": true"} {
		if !strings.Contains(before, want) {
			t.Fatalf("the live views miss %q:\n%s", want, before)
		}
	}
	res := s.replayViews(t, nil)
	if res.Applied == 0 || res.Records == 0 {
		t.Fatalf("replay: %+v", res)
	}
	if after := s.views(t); after != before {
		t.Fatalf("replay differs from the live build:\nlive:\n%s\nreplayed:\n%s", before, after)
	}
	// A task that runs after the feed read the topic, recorded by the
	// live sink in the old tables, is caught up by the swap.
	res = s.replayViews(t, func() {
		s.enqueue(t, q, taskqueues.TypeEcho, `{"during": "replay"}`)
		s.eventually(t, 30*time.Second, "the task during the replay finishes", func() bool {
			return num(s.stats(t)["completed_tasks"]) == 6
		})
		before = s.views(t)
	})
	if after := s.views(t); after != before {
		t.Fatalf("replay under traffic differs from the live build:\nlive:\n%s\nreplayed:\n%s", before, after)
	}
	// The live pipeline goes on with the swapped-in tables.
	s.manage(t, taskadmin.PathQueueManage, map[string]any{"action": "resume", "queue_name": hi})
	if p, err := s.App.Reader.QueuePaused(context.Background(), hi); err != nil || p {
		t.Fatalf("after the swap, %s paused: %v %v", hi, p, err)
	}
}

type hooked struct {
	projections.Feed
	after func()
}

func (h hooked) Rebuild(ctx context.Context, conn *pgx.Conn, caughtUp func(context.Context) error, progress func(read, total int64)) (int64, error) {
	n, err := h.Feed.Rebuild(ctx, conn, caughtUp, progress)
	if err == nil && h.after != nil {
		h.after()
	}
	return n, err
}

// A QueueCleared delivered to the reactor again (its checkpoint lost)
// neither clears the tasks enqueued since nor records a second count.
func TestRedeliveredClearRunsOnce(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	q := s.Q["low"]
	s.manage(t, taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": q})
	s.enqueue(t, q, taskqueues.TypeEcho, `{}`)
	s.manage(t, taskadmin.PathQueueManage, map[string]any{"action": "clear", "queue_name": q})
	later := s.enqueue(t, q, taskqueues.TypeEcho, `{"later": true}`)

	ctx := context.Background()
	stream := tasks.QueueStream(q)
	var env events.Envelope
	err := s.Pool.QueryRow(ctx, `SELECT event_id, stream_id, stream_version, position, type, occurred_at, metadata, data
		FROM events WHERE stream_id = $1 AND type = $2`, stream, tasks.QueueCleared{}.EventType()).
		Scan(&env.ID, &env.Stream, &env.Version, &env.Position, &env.Type, &env.OccurredAt, &env.Metadata, &env.Data)
	if err != nil {
		t.Fatal(err)
	}
	s.eventually(t, 10*time.Second, "the clear is recorded", func() bool {
		return s.EventCount(t, stream, tasks.QueueClearApplied{}.EventType()) == 1
	})
	// The live reactor still gets the QueueClearApplied (v+1) from the
	// topic and checkpoints it; rewinding before it did races that write
	// (the redelivery below then fails "checkpoint moved concurrently").
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := checkpoints.Wait(wctx, s.Pool, reactors.ControlName, stream, env.Version+1); err != nil {
		t.Fatal(err)
	}
	// The reactor forgets it handled the clear, and gets it again.
	if _, err := s.Pool.Exec(ctx, `UPDATE projection_checkpoints SET version = $3 WHERE projection = $1 AND stream_id = $2`,
		reactors.ControlName, stream, env.Version-1); err != nil {
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
	ctl := reactors.Control(s.App.Inspector, s.App.Registry, pub, s.Pool)
	if out, err := projections.Apply(ctx, s.Pool, reg, ctl, env); err != nil || out != projections.Applied {
		t.Fatalf("redelivery: %v %v", out, err)
	}
	if n := s.EventCount(t, stream, tasks.QueueClearApplied{}.EventType()); n != 1 {
		t.Fatalf("%d clear outcomes recorded", n)
	}
	if info, err := s.App.Inspector.GetTaskInfo(q, later); err != nil || info == nil {
		t.Fatalf("the task enqueued after the clear is gone: %v", err)
	}
}
