package taskadmin_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/cfgd/cfgd/api/rest/taskadmin"
	"github.com/cfgd/cfgd/api/worker"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/events/tasks"
)

// badQuery is what every endpoint answers a query string that does not decode.
const badQuery = "the query string is not valid URL encoding"

func TestBadInput(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	s.startWorker(t, "w-"+randomHex(3))
	q := s.Q["default"]
	cases := []struct {
		name   string
		path   string
		body   any
		status int
		error  string
		field  string
	}{
		{"queue: unknown action", taskadmin.PathQueueManage, map[string]any{"action": "explode", "queue_name": q}, 400, "Invalid action", ""},
		{"queue: unknown action on unknown queue", taskadmin.PathQueueManage, map[string]any{"action": "explode", "queue_name": "nope"}, 400, "Invalid action", ""},
		{"queue: unknown queue", taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": "nope"}, 404, "Unknown queue: nope", ""},
		{"queue: unknown queue, not even a name", taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": "<b>x</b>"}, 404, "Unknown queue", ""},
		{"queue: missing action", taskadmin.PathQueueManage, map[string]any{"queue_name": q}, 400, "action is required", "action"},
		{"queue: missing queue_name", taskadmin.PathQueueManage, map[string]any{"action": "pause"}, 400, "queue_name is required", "queue_name"},
		{"queue: empty queue_name", taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": ""}, 400, "queue_name is required", "queue_name"},
		{"queue: wrong type", taskadmin.PathQueueManage, map[string]any{"action": 1, "queue_name": q}, 400, `field "action" must be of type string`, ""},
		{"queue: not JSON", taskadmin.PathQueueManage, "{", 400, "request body is not valid JSON", ""},
		{"worker: unknown action", taskadmin.PathWorkerManage, map[string]any{"action": "dance", "worker_id": "x"}, 400, "Invalid action", ""},
		{"worker: unknown worker", taskadmin.PathWorkerManage, map[string]any{"action": "restart", "worker_id": "nobody-1"}, 404, "Unknown worker: nobody-1", ""},
		{"worker: missing worker_id", taskadmin.PathWorkerManage, map[string]any{"action": "restart"}, 400, "worker_id is required", "worker_id"},
		{"worker: missing action", taskadmin.PathWorkerManage, map[string]any{"worker_id": "x"}, 400, "action is required", "action"},
		{"recent: bad limit", taskadmin.PathRecent + "?limit=0", nil, 400, "invalid input", "limit"},
		// A query that does not decode is refused, never a dropped parameter.
		{"recent: query not URL encoding", taskadmin.PathRecent + "?limit=%zz", nil, 400, badQuery, ""},
		{"queues: query not URL encoding", taskadmin.PathQueueStatus + "?all=%zz", nil, 400, badQuery, ""},
		{"tasks: query not URL encoding", taskadmin.PathTasks + "?state=pending&queue=" + q + "&size=%zz", nil, 400, badQuery, ""},
		{"task: query not URL encoding", taskadmin.PathTask + "?id=x&queue=%zz", nil, 400, badQuery, ""},
		{"history: query not URL encoding", taskadmin.PathHistory + "?minutes=30;x", nil, 400, badQuery, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := http.MethodPost
			if c.body == nil {
				method = http.MethodGet
			}
			res := s.Do(t, method, c.path, c.body, s.Admin...)
			if res.Status != c.status || res.Str("error") != c.error {
				t.Fatalf("got %d %s, want %d %q", res.Status, res.Raw, c.status, c.error)
			}
			if res.Body["success"] != false || res.Str("code") == "" {
				t.Fatalf("error body lacks success=false and a code: %s", res.Raw)
			}
			if c.field != "" && res.Field(c.field) == "" {
				t.Fatalf("error does not name %s: %s", c.field, res.Raw)
			}
		})
	}
	t.Run("not signed in", func(t *testing.T) {
		for _, p := range []string{taskadmin.PathQueueStatus, taskadmin.PathTaskStatistics} {
			if res := s.Do(t, "GET", p, nil); res.Status != 401 {
				t.Fatalf("%s without credentials: %d", p, res.Status)
			}
		}
		if res := s.Do(t, "POST", taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": q}); res.Status != 401 {
			t.Fatalf("queue-manage without credentials: %d", res.Status)
		}
	})
	t.Run("no event for a refused command", func(t *testing.T) {
		if n := s.EventCount(t, tasks.QueueStream("nope"), tasks.QueuePaused{}.EventType()); n != 0 {
			t.Fatalf("%d events for an unknown queue", n)
		}
	})
}

func TestQueueStatusListsConfiguredQueuesBeforeAnyTask(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	res := s.Do(t, "GET", taskadmin.PathQueueStatus, nil, s.Admin...)
	qs, _ := res.Body["queues"].([]any)
	if res.Status != 200 || len(qs) != 3 {
		t.Fatalf("queue-status: %d %s", res.Status, res.Raw)
	}
	for i, short := range []string{"default", "high", "low"} {
		q := qs[i].(map[string]any)
		if q["name"] != s.Q[short] || num(q["size"]) != 0 || q["is_paused"] != false || num(q["workers"]) != 0 {
			t.Fatalf("queue %d: %v", i, q)
		}
	}
	st := s.stats(t)
	if num(st["total_tasks"]) != 0 || st["success_rate"] != 0.0 {
		t.Fatalf("statistics of nothing: %v", st)
	}
	s.startWorker(t, "w-"+randomHex(3))
	s.eventually(t, 5*time.Second, "queue-status counts the worker", func() bool { return num(s.queue(t, s.Q["low"])["workers"]) == 1 })
}

func TestPauseStopsConsumptionAndResumeRestartsIt(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	s.startWorker(t, "w-"+randomHex(3))
	q := s.Q["high"]

	res := s.Do(t, "POST", taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": q}, s.Admin...)
	if res.Status != 200 || res.Obj("queue")["is_paused"] != true {
		t.Fatalf("pause: %d %s", res.Status, res.Raw)
	}
	// Read-your-writes: the very next poll shows it.
	if got := s.queue(t, q); got["is_paused"] != true {
		t.Fatalf("queue-status after pause: %v", got)
	}
	// Pausing again is harmless and still paused.
	if res := s.Do(t, "POST", taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": q}, s.Admin...); res.Status != 200 || res.Obj("queue")["is_paused"] != true {
		t.Fatalf("second pause: %d %s", res.Status, res.Raw)
	}
	for i := range 5 {
		s.enqueue(t, q, taskqueues.TypeEcho, fmt.Sprintf(`{"n": %d}`, i))
	}
	// The enqueued records reach the statistics while nothing runs.
	s.eventually(t, 10*time.Second, "5 tasks counted", func() bool { return num(s.stats(t)["total_tasks"]) == 5 })
	time.Sleep(time.Second) // a running worker polls every 200ms
	if got := s.queue(t, q); num(got["size"]) != 5 {
		t.Fatalf("paused queue after 1s: %v, want 5 waiting", got)
	}
	if st := s.stats(t); num(st["completed_tasks"]) != 0 || num(st["pending_tasks"]) != 5 {
		t.Fatalf("tasks ran on a paused queue: %v", st)
	}

	res = s.Do(t, "POST", taskadmin.PathQueueManage, map[string]any{"action": "resume", "queue_name": q}, s.Admin...)
	if res.Status != 200 || res.Obj("queue")["is_paused"] != false {
		t.Fatalf("resume: %d %s", res.Status, res.Raw)
	}
	s.eventually(t, 15*time.Second, "all 5 completed", func() bool { return num(s.stats(t)["completed_tasks"]) == 5 })
	if got := s.queue(t, q); num(got["size"]) != 0 || got["is_paused"] != false {
		t.Fatalf("after resume: %v", got)
	}
	if n := s.EventCount(t, tasks.QueueStream(q), tasks.QueuePaused{}.EventType()); n != 2 {
		t.Fatalf("%d queue.paused events, want 2", n)
	}
}

func TestClearRemovesWaitingTasksOnly(t *testing.T) {
	t.Parallel()
	s := startStack(t, func(c *taskqueues.Config) { c.Threads = 1 })
	s.startWorker(t, "w-"+randomHex(3))
	q := s.Q["default"]
	running := s.enqueue(t, q, taskqueues.TypeSleep, `{"ms": 6000}`)
	s.eventually(t, 10*time.Second, "the long task runs", func() bool {
		info, err := s.App.Inspector.GetTaskInfo(q, running)
		return err == nil && info.State == asynq.TaskStateActive
	})
	if res := s.Do(t, "POST", taskadmin.PathQueueManage, map[string]any{"action": "pause", "queue_name": q}, s.Admin...); res.Status != 200 {
		t.Fatalf("pause: %d %s", res.Status, res.Raw)
	}
	for range 3 {
		s.enqueue(t, q, taskqueues.TypeEcho, `{}`)
	}
	// A scheduled task waits too.
	client := asynq.NewClientFromRedisClient(s.TR)
	if _, err := client.Enqueue(asynq.NewTask(taskqueues.TypeEcho, nil), asynq.Queue(q), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// The live snapshot is cached for SnapshotTTL.
	s.eventually(t, 5*time.Second, "4 tasks wait", func() bool { return num(s.queue(t, q)["size"]) == 4 })

	if info, err := s.App.Inspector.GetTaskInfo(q, running); err != nil || info.State != asynq.TaskStateActive {
		t.Fatalf("the long task should still run at the clear: %v %v", info, err)
	}
	res := s.Do(t, "POST", taskadmin.PathQueueManage, map[string]any{"action": "clear", "queue_name": q}, s.Admin...)
	if res.Status != 200 {
		t.Fatalf("clear: %d %s", res.Status, res.Raw)
	}
	got := res.Obj("queue")
	if num(got["size"]) != 0 || got["is_paused"] != true {
		t.Fatalf("after clear: %v, want size 0 and still paused", got)
	}
	// The running task was not waiting: it finishes.
	s.eventually(t, 15*time.Second, "the running task completes", func() bool {
		st := s.stats(t)
		return num(st["completed_tasks"]) == 1 && num(st["cleared_tasks"]) == 4 && num(st["pending_tasks"]) == 0
	})
	st := s.stats(t)
	// The scheduled task was enqueued outside cfgd; the clear that removed
	// it counted it.
	if num(st["total_tasks"]) != 5 {
		t.Fatalf("statistics after clear: %v", st)
	}
}

func TestRestartingAWorkerWhileTasksRunLosesNone(t *testing.T) {
	t.Parallel()
	s := startStack(t, func(c *taskqueues.Config) {
		c.Threads = 2
		// Shorter than a task: the tasks in flight at the restart are cut
		// and must go back to the queue.
		c.ShutdownTimeout = 300 * time.Millisecond
	})
	id := "w-" + randomHex(3)
	// Count the runs of each task, to see that the restart cut some.
	var mu sync.Mutex
	runs := map[string]int{}
	mux := worker.Handlers(testenv.Quiet())
	s.startWorkerWith(t, id, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		tid, _ := asynq.GetTaskID(ctx)
		mu.Lock()
		runs[tid]++
		mu.Unlock()
		return mux.ProcessTask(ctx, task)
	}))
	q := s.Q["low"]
	// Long enough that the restart lands while tasks still run, even when a
	// loaded machine takes seconds to carry the command to the worker.
	const n = 6
	for range n {
		s.enqueue(t, q, taskqueues.TypeSleep, `{"ms": 3000}`)
	}
	s.eventually(t, 10*time.Second, "tasks run", func() bool { return num(s.queue(t, q)["active"]) > 0 })

	res := s.Do(t, "POST", taskadmin.PathWorkerManage, map[string]any{"action": "restart", "worker_id": id}, s.Admin...)
	w := res.Obj("worker")
	if res.Status != 200 || w["state"] != tasks.WorkerRunning || num(w["restarts"]) != 1 {
		t.Fatalf("restart: %d %s", res.Status, res.Raw)
	}
	s.eventually(t, 30*time.Second, "every task completed", func() bool { return num(s.stats(t)["completed_tasks"]) == n })
	st := s.stats(t)
	if num(st["total_tasks"]) != n || num(st["failed_tasks"]) != 0 || num(st["pending_tasks"]) != 0 || st["success_rate"] != 100.0 {
		t.Fatalf("statistics: %v", st)
	}
	if got := s.queue(t, q); num(got["size"]) != 0 {
		t.Fatalf("queue after the run: %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	again := 0
	for _, r := range runs {
		if r > 1 {
			again++
		}
	}
	if len(runs) != n || again == 0 {
		t.Fatalf("runs per task %v: want all %d run, and the ones cut by the restart run again", runs, n)
	}
}

func TestStopAndStartAWorker(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	id := "w-" + randomHex(3)
	s.startWorker(t, id)
	q := s.Q["default"]
	res := s.Do(t, "POST", taskadmin.PathWorkerManage, map[string]any{"action": "stop", "worker_id": id}, s.Admin...)
	if res.Status != 200 || res.Obj("worker")["state"] != tasks.WorkerStopped {
		t.Fatalf("stop: %d %s", res.Status, res.Raw)
	}
	if got := s.queue(t, q); num(got["workers"]) != 0 {
		t.Fatalf("a stopped worker still counts: %v", got)
	}
	s.enqueue(t, q, taskqueues.TypeEcho, `{}`)
	time.Sleep(time.Second)
	if got := s.queue(t, q); num(got["size"]) != 1 {
		t.Fatalf("a stopped worker took a task: %v", got)
	}
	res = s.Do(t, "POST", taskadmin.PathWorkerManage, map[string]any{"action": "start", "worker_id": id}, s.Admin...)
	if res.Status != 200 || res.Obj("worker")["state"] != tasks.WorkerRunning {
		t.Fatalf("start: %d %s", res.Status, res.Raw)
	}
	s.eventually(t, 10*time.Second, "the task ran", func() bool { return num(s.stats(t)["completed_tasks"]) == 1 })
	ws := s.Do(t, "GET", taskadmin.PathWorkers, nil, s.Admin...)
	list, _ := ws.Body["workers"].([]any)
	if ws.Status != 200 || len(list) != 1 || list[0].(map[string]any)["last_command"] != "start" {
		t.Fatalf("workers: %d %s", ws.Status, ws.Raw)
	}
}

func TestStatisticsEqualTheTasksRun(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil) // MaxRetries 1: a failing task runs twice
	s.startWorker(t, "w-"+randomHex(3))
	ids := map[string]bool{}
	for range 4 {
		ids[s.enqueue(t, s.Q["default"], taskqueues.TypeEcho, `{"hello": "world"}`)] = true
	}
	for range 2 {
		ids[s.enqueue(t, s.Q["high"], taskqueues.TypeFail, `{"message": "boom"}`)] = true
	}
	s.eventually(t, 20*time.Second, "every task finished", func() bool {
		st := s.stats(t)
		return num(st["completed_tasks"])+num(st["failed_tasks"]) == 6
	})
	st := s.stats(t)
	if num(st["total_tasks"]) != 6 || num(st["completed_tasks"]) != 4 || num(st["failed_tasks"]) != 2 || num(st["pending_tasks"]) != 0 {
		t.Fatalf("statistics: %v", st)
	}
	if rate := st["success_rate"].(float64); rate < 66.66 || rate > 66.67 {
		t.Fatalf("success_rate %v, want 66.67", rate)
	}
	// Every lifecycle step was recorded once: a failing task started
	// twice, was retried once and failed once.
	var steps int
	if err := s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM task_lifecycle`).Scan(&steps); err != nil {
		t.Fatal(err)
	}
	if want := 4*3 + 2*(1+2+1+1); steps != want {
		t.Fatalf("%d lifecycle steps, want %d", steps, want)
	}
	rec := s.Do(t, "GET", taskadmin.PathRecent, nil, s.Admin...)
	list, _ := rec.Body["tasks"].([]any)
	if len(list) != 6 {
		t.Fatalf("recent: %s", rec.Raw)
	}
	for _, x := range list {
		m := x.(map[string]any)
		if !ids[m["id"].(string)] {
			t.Fatalf("unexpected task %v", m)
		}
		if m["type"] == taskqueues.TypeFail && (m["state"] != "failed" || num(m["attempts"]) != 2 || m["error"] != "boom") {
			t.Fatalf("failed task: %v", m)
		}
	}
}
