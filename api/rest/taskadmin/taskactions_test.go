package taskadmin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cfgd/cfgd/api/rest/taskadmin"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/reactors"
)

func (s *stack) tasksIn(t *testing.T, queue, state string) []map[string]any {
	t.Helper()
	res := s.Do(t, "GET", fmt.Sprintf("%s?queue=%s&state=%s&size=100", taskadmin.PathTasks, queue, state), nil, s.Admin...)
	if res.Status != 200 {
		t.Fatalf("tasks %s %s: %d %s", queue, state, res.Status, res.Raw)
	}
	var out []map[string]any
	ts, _ := res.Body["tasks"].([]any)
	for _, x := range ts {
		out = append(out, x.(map[string]any))
	}
	return out
}

// Per-task and bulk actions are queue events carried out by the reactor;
// a deleted task ends and an archived one waits in the statistics, and an
// archived task run again completes.
func TestTaskActionsAreEventsAndKeepTheStatisticsRight(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	q := s.Q["low"]
	ids := make([]string, 4)
	for i := range ids {
		ids[i] = s.enqueue(t, q, taskqueues.TypeEcho, fmt.Sprintf(`{"n": %d}`, i))
	}
	pending := s.tasksIn(t, q, tasks.StatePending)
	if len(pending) != 4 || pending[0]["payload"] != `{"n": 0}` || pending[0]["type"] != taskqueues.TypeEcho {
		t.Fatalf("pending tasks: %v", pending)
	}
	post := func(path string, body map[string]any) map[string]any {
		t.Helper()
		res := s.Do(t, "POST", path, body, s.Admin...)
		if res.Status != 200 {
			t.Fatalf("%s %v: %d %s", path, body, res.Status, res.Raw)
		}
		return res.Body
	}
	// Refused: what makes no sense in the task's state, and unknown tasks.
	for _, c := range []struct {
		body   map[string]any
		status int
	}{
		{map[string]any{"action": "run", "task_id": ids[0]}, 400},
		{map[string]any{"action": "explode", "task_id": ids[0]}, 400},
		{map[string]any{"action": "delete", "task_id": "no-such-task"}, 404},
		{map[string]any{"action": "delete"}, 400},
	} {
		if res := s.Do(t, "POST", taskadmin.PathTaskManage, c.body, s.Admin...); res.Status != c.status || res.Body["success"] != false {
			t.Fatalf("%v: %d %s, want %d", c.body, res.Status, res.Raw, c.status)
		}
	}
	for _, c := range []struct {
		body   map[string]any
		status int
	}{
		{map[string]any{"action": "run", "queue_name": q, "state": "pending"}, 400},
		{map[string]any{"action": "delete", "queue_name": q, "state": "active"}, 400},
		{map[string]any{"action": "delete", "queue_name": q, "state": "nonsense"}, 400},
		{map[string]any{"action": "delete", "queue_name": "never-seen-queue", "state": "pending"}, 404},
	} {
		if res := s.Do(t, "POST", taskadmin.PathBulkManage, c.body, s.Admin...); res.Status != c.status || res.Body["success"] != false {
			t.Fatalf("%v: %d %s, want %d", c.body, res.Status, res.Raw, c.status)
		}
	}

	got := post(taskadmin.PathTaskManage, map[string]any{"action": "archive", "task_id": ids[0]})
	if task, _ := got["task"].(map[string]any); task["state"] != tasks.StateArchived {
		t.Fatalf("archive answered %v", got)
	}
	// Again: harmless, the task stays archived (the command refuses it).
	if res := s.Do(t, "POST", taskadmin.PathTaskManage, map[string]any{"action": "archive", "task_id": ids[0]}, s.Admin...); res.Status != 400 {
		t.Fatalf("archive of an archived task: %d %s", res.Status, res.Raw)
	}
	got = post(taskadmin.PathTaskManage, map[string]any{"action": "delete", "task_id": ids[1], "queue_name": q})
	if got["task"] != nil {
		t.Fatalf("delete answered %v", got)
	}
	got = post(taskadmin.PathBulkManage, map[string]any{"action": "delete", "queue_name": q, "state": "pending"})
	if num(got["affected"]) != 2 {
		t.Fatalf("bulk delete answered %v", got)
	}
	if n := len(s.tasksIn(t, q, tasks.StatePending)); n != 0 {
		t.Fatalf("%d pending after the bulk delete", n)
	}
	s.eventually(t, 10*time.Second, "the statistics count 3 deleted and 1 archived", func() bool {
		st := s.stats(t)
		return num(st["total_tasks"]) == 4 && num(st["deleted_tasks"]) == 3 && num(st["archived_tasks"]) == 1 && num(st["pending_tasks"]) == 0
	})
	for _, typ := range []string{tasks.TaskActionRequested{}.EventType(), tasks.TasksBulkRequested{}.EventType(), tasks.TasksBulkApplied{}.EventType()} {
		if n := s.EventCount(t, tasks.QueueStream(q), typ); n == 0 {
			t.Fatalf("no %s event on %s", typ, tasks.QueueStream(q))
		}
	}

	// The archived task, run in bulk, completes on a worker.
	got = post(taskadmin.PathBulkManage, map[string]any{"action": "run", "queue_name": q, "state": "archived"})
	if num(got["affected"]) != 1 {
		t.Fatalf("bulk run answered %v", got)
	}
	s.startWorker(t, "w-"+randomHex(3))
	s.eventually(t, 10*time.Second, "the archived task ran", func() bool {
		st := s.stats(t)
		return num(st["completed_tasks"]) == 1 && num(st["archived_tasks"]) == 0 && num(st["deleted_tasks"]) == 3 && num(st["pending_tasks"]) == 0
	})
	// Deleting a completed task keeps it completed in the statistics.
	s.eventually(t, 5*time.Second, "the task is listed completed", func() bool { return len(s.tasksIn(t, q, tasks.StateCompleted)) == 1 })
	got = post(taskadmin.PathBulkManage, map[string]any{"action": "delete", "queue_name": q, "state": "completed"})
	if num(got["affected"]) != 1 {
		t.Fatalf("bulk delete of completed answered %v", got)
	}
	time.Sleep(500 * time.Millisecond)
	if st := s.stats(t); num(st["completed_tasks"]) != 1 || num(st["deleted_tasks"]) != 3 {
		t.Fatalf("statistics after deleting a completed task: %v", st)
	}
	hist := s.Do(t, "GET", taskadmin.PathHistory+"?minutes=5", nil, s.Admin...)
	pts, _ := hist.Body["points"].([]any)
	if hist.Status != 200 || len(pts) == 0 {
		t.Fatalf("history: %d %s", hist.Status, hist.Raw)
	}
}

// A task action or a bulk action delivered to the reactor again (its
// checkpoint lost) changes nothing new: the archived task stays archived
// with one record, and the bulk delete neither deletes the task enqueued
// since nor records a second outcome.
func TestRedeliveredTaskActionsChangeNothingNew(t *testing.T) {
	t.Parallel()
	s := startStackWith(t, stackOpts{noControl: true})
	q := s.Q["low"]
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = s.enqueue(t, q, taskqueues.TypeEcho, `{}`)
	}
	ctx := context.Background()
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
	load := func(ap taskqueues.Appended) events.Envelope {
		t.Helper()
		var env events.Envelope
		if err := s.Pool.QueryRow(ctx, `SELECT event_id, stream_id, stream_version, position, type, occurred_at, metadata, data
			FROM events WHERE stream_id = $1 AND stream_version = $2`, ap.Stream, ap.Version).
			Scan(&env.ID, &env.Stream, &env.Version, &env.Position, &env.Type, &env.OccurredAt, &env.Metadata, &env.Data); err != nil {
			t.Fatal(err)
		}
		return env
	}
	twice := func(env events.Envelope) {
		t.Helper()
		for i := range 2 {
			if i > 0 {
				// The reactor forgets it handled it.
				if _, err := s.Pool.Exec(ctx, `UPDATE projection_checkpoints SET version = $3 WHERE projection = $1 AND stream_id = $2`,
					reactors.ControlName, env.Stream, env.Version-1); err != nil {
					t.Fatal(err)
				}
			}
			if out, err := projections.Apply(ctx, s.Pool, reg, ctl, env); err != nil || out != projections.Applied {
				t.Fatalf("delivery %d of %s: %v %v", i+1, env.Type, out, err)
			}
		}
	}
	info, err := s.App.Reader.Task(ctx, q, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	ap, err := s.App.Manager.ManageTask(ctx, tasks.ActionArchive, info, events.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	twice(load(ap))
	if got, err := s.App.Reader.Task(ctx, q, ids[0]); err != nil || got.State != tasks.StateArchived {
		t.Fatalf("after the archive: %v %v", got, err)
	}

	ap, err = s.App.Manager.ManageTasks(ctx, tasks.ActionDelete, q, tasks.StatePending, false, events.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	env := load(ap)
	if out, err := projections.Apply(ctx, s.Pool, reg, ctl, env); err != nil || out != projections.Applied {
		t.Fatalf("bulk delete: %v %v", out, err)
	}
	later := s.enqueue(t, q, taskqueues.TypeEcho, `{"later": true}`)
	if _, err := s.Pool.Exec(ctx, `UPDATE projection_checkpoints SET version = $3 WHERE projection = $1 AND stream_id = $2`,
		reactors.ControlName, env.Stream, env.Version-1); err != nil {
		t.Fatal(err)
	}
	if out, err := projections.Apply(ctx, s.Pool, reg, ctl, env); err != nil || out != projections.Applied {
		t.Fatalf("bulk delete again: %v %v", out, err)
	}
	if n := s.EventCount(t, tasks.QueueStream(q), tasks.TasksBulkApplied{}.EventType()); n != 1 {
		t.Fatalf("%d bulk outcomes recorded", n)
	}
	if _, err := s.App.Reader.Task(ctx, q, later); err != nil {
		t.Fatalf("the task enqueued after the bulk delete: %v", err)
	}
	var affected int
	if err := s.Pool.QueryRow(ctx, `SELECT (data->>'affected')::int FROM events WHERE event_id = $1`, tasks.BulkAppliedID(env.ID)).Scan(&affected); err != nil || affected != 2 {
		t.Fatalf("bulk outcome: %d %v", affected, err)
	}
	s.eventually(t, 10*time.Second, "2 deleted, 1 archived, 1 pending", func() bool {
		st := s.stats(t)
		return num(st["deleted_tasks"]) == 2 && num(st["archived_tasks"]) == 1 && num(st["pending_tasks"]) == 1 && num(st["total_tasks"]) == 4
	})
}
