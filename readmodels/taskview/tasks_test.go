package taskview_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// counting is the real asynq inspector, counting the Redis rounds.
type counting struct {
	*asynq.Inspector
	rounds atomic.Int64
}

func (c *counting) Queues() ([]string, error) {
	c.rounds.Add(1)
	return c.Inspector.Queues()
}

type noWorkers struct{}

func (noWorkers) Live(context.Context) ([]tasks.WorkerState, error) { return nil, nil }

// Many dashboards polling at once cost one Redis round per TTL, and a
// task enqueued shows once the TTL passed.
func TestLiveSnapshotIsSharedForItsTTL(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	rdb, _ := testenv.RedisDB(t, authtest.RedisURL())
	const q = "snap"
	insp := &counting{Inspector: asynq.NewInspectorFromRedisClient(rdb)}
	const ttl = 500 * time.Millisecond
	r := taskview.NewReader(pool, insp, noWorkers{}, []string{q}, ttl)
	ctx := context.Background()

	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			qs, err := r.QueueStatus(ctx)
			if err != nil || len(qs) != 1 || qs[0].Size != 0 {
				t.Errorf("queue-status: %v %v", qs, err)
			}
		}()
	}
	wg.Wait()
	if n := insp.rounds.Load(); n != 1 {
		t.Fatalf("50 polls made %d Redis rounds, want 1", n)
	}
	client := asynq.NewClientFromRedisClient(rdb)
	if _, err := client.Enqueue(asynq.NewTask("demo:echo", nil), asynq.Queue(q)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl)
	qs, err := r.QueueStatus(ctx)
	if err != nil || qs[0].Size != 1 || qs[0].Pending != 1 {
		t.Fatalf("after the ttl: %v %v", qs, err)
	}
	if n := insp.rounds.Load(); n != 2 {
		t.Fatalf("%d Redis rounds, want 2", n)
	}
}

// success_rate is the completed share of every task seen, the pending
// (enqueued or running) and the cleared ones included.
func TestSuccessRateCountsPendingAndClearedTasks(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	rec := func(id, step string, attempt int) tasks.Lifecycle {
		return tasks.Lifecycle{TaskID: id, Queue: "q", Type: "demo:echo", Step: step, Attempt: attempt, At: at}
	}
	recs := []tasks.Lifecycle{
		rec("ok1", tasks.StepEnqueued, 0), rec("ok1", tasks.StepSucceeded, 1),
		rec("ok2", tasks.StepEnqueued, 0), rec("ok2", tasks.StepStarted, 1), rec("ok2", tasks.StepSucceeded, 1),
		rec("bad", tasks.StepEnqueued, 0), rec("bad", tasks.StepFailed, 1),
		rec("running", tasks.StepEnqueued, 0), rec("running", tasks.StepStarted, 1),
		rec("waiting", tasks.StepEnqueued, 0),
		rec("gone", tasks.StepEnqueued, 0), rec("gone", tasks.StepCleared, 0),
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := taskview.ApplyLifecycle(ctx, tx, recs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := taskview.NewReader(pool, nil, noWorkers{}, nil, time.Second).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := taskview.Statistics{TotalTasks: 6, CompletedTasks: 2, FailedTasks: 1, PendingTasks: 2, ClearedTasks: 1}
	rate := st.SuccessRate
	st.SuccessRate = 0
	if st != want || rate < 33.33 || rate > 33.34 {
		t.Fatalf("statistics %+v rate %v, want %+v rate 33.33", st, rate, want)
	}
}

// Staff's deletes end a task and archives park it, whatever order the
// records arrive in; a delete never undoes a finish, and a run after an
// archive counts again.
func TestDeletedAndArchivedTasksLeavePending(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	rec := func(id, step string, attempt int) tasks.Lifecycle {
		return tasks.Lifecycle{TaskID: id, Queue: "q", Type: "demo:echo", Step: step, Attempt: attempt, At: at}
	}
	cases := []struct {
		id, state string
		recs      []tasks.Lifecycle
	}{
		{"deleted", tasks.StepDeleted, []tasks.Lifecycle{rec("deleted", tasks.StepEnqueued, 0), rec("deleted", tasks.StepDeleted, 0)}},
		{"deleted-first", tasks.StepDeleted, []tasks.Lifecycle{rec("deleted-first", tasks.StepDeleted, 0), rec("deleted-first", tasks.StepEnqueued, 0)}},
		{"deleted-after-retry", tasks.StepDeleted, []tasks.Lifecycle{rec("deleted-after-retry", tasks.StepEnqueued, 0),
			rec("deleted-after-retry", tasks.StepStarted, 1), rec("deleted-after-retry", tasks.StepRetried, 1), rec("deleted-after-retry", tasks.StepDeleted, 0)}},
		{"archived", tasks.StepArchived, []tasks.Lifecycle{rec("archived", tasks.StepEnqueued, 0), rec("archived", tasks.StepArchived, 0)}},
		{"archived-after-retry", tasks.StepArchived, []tasks.Lifecycle{rec("archived-after-retry", tasks.StepEnqueued, 0),
			rec("archived-after-retry", tasks.StepStarted, 1), rec("archived-after-retry", tasks.StepRetried, 1), rec("archived-after-retry", tasks.StepArchived, 1)}},
		{"archived-then-run", tasks.StepStarted, []tasks.Lifecycle{rec("archived-then-run", tasks.StepEnqueued, 0),
			rec("archived-then-run", tasks.StepArchived, 0), rec("archived-then-run", tasks.StepStarted, 1)}},
		{"completed-then-deleted", tasks.StepSucceeded, []tasks.Lifecycle{rec("completed-then-deleted", tasks.StepEnqueued, 0),
			rec("completed-then-deleted", tasks.StepSucceeded, 1), rec("completed-then-deleted", tasks.StepDeleted, 0)}},
		{"failed-then-deleted", tasks.StepFailed, []tasks.Lifecycle{rec("failed-then-deleted", tasks.StepEnqueued, 0),
			rec("failed-then-deleted", tasks.StepFailed, 1), rec("failed-then-deleted", tasks.StepDeleted, 0)}},
	}
	for _, c := range cases {
		// One batch per record: the order is the arrival order.
		for _, r := range c.recs {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := taskview.ApplyLifecycle(ctx, tx, []tasks.Lifecycle{r}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var state string
		if err := pool.QueryRow(ctx, `SELECT state FROM task_runs WHERE task_id = $1`, c.id).Scan(&state); err != nil || state != c.state {
			t.Errorf("%s: state %q (%v), want %q", c.id, state, err, c.state)
		}
	}
	st, err := taskview.NewReader(pool, nil, noWorkers{}, nil, time.Second).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := taskview.Statistics{TotalTasks: 8, CompletedTasks: 1, FailedTasks: 1, PendingTasks: 1, DeletedTasks: 3, ArchivedTasks: 2}
	st.SuccessRate = 0
	if st != want {
		t.Fatalf("statistics %+v, want %+v", st, want)
	}
}

// phantom lists a queue that is deleted before it is asked about, as
// happens when a queue goes between the two Redis rounds.
type phantom struct {
	*asynq.Inspector
	calls atomic.Int64
}

func (p *phantom) Queues() ([]string, error) {
	qs, err := p.Inspector.Queues()
	if p.calls.Add(1) == 1 {
		qs = append(qs, "gone-meanwhile")
	}
	return qs, err
}

// A queue deleted between the listing and its sizes is shown empty; the
// snapshot (and every poll sharing it) does not fail.
func TestQueueDeletedMeanwhileIsEmpty(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	rdb, _ := testenv.RedisDB(t, authtest.RedisURL())
	r := taskview.NewReader(pool, &phantom{Inspector: asynq.NewInspectorFromRedisClient(rdb)}, noWorkers{}, []string{"configured"}, time.Millisecond)
	qs, err := r.QueueStatusAll(context.Background())
	if err != nil || len(qs) != 2 || qs[1].Name != "gone-meanwhile" || qs[1].Size != 0 || qs[1].Configured {
		t.Fatalf("queue-status: %+v %v", qs, err)
	}
}
