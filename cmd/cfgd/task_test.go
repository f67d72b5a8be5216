package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

func runCLI(args ...string) (code int, stdout, msg string) {
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	ee := (*exitError)(nil)
	switch {
	case errors.As(err, &ee):
		code = ee.code
	case err != nil:
		code = 1
	}
	msg = errb.String()
	if err != nil && (ee == nil || ee.err != nil) {
		msg += err.Error()
	}
	return code, out.String(), msg
}

// The whole path through the binary's commands: cfgd serve, cfgd worker
// and cfgd task enqueue share the embedded broker and Redis, and the task
// shows in the statistics.
func TestWorkerAndTaskEnqueueCommands(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	// The worker and the CLI find the embedded broker at its address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kafkaAddr := l.Addr().String()
	_ = l.Close()
	t.Setenv("KAFKA__EMBEDDED_ADDR", kafkaAddr)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "t" + hex.EncodeToString(b) + "-"
	t.Setenv("TASKS__QUEUES", prefix+"default,"+prefix+"high:9")
	t.Setenv("TASKS__KEY_PREFIX", "cfgd-test:"+prefix)
	t.Setenv("TASKS__WORKER_ID", prefix+"worker")
	t.Setenv("TASKS__HEARTBEAT", "200ms")
	t.Cleanup(func() {
		o, _ := redis.ParseURL("redis://127.0.0.1:6379/0")
		rdb := redis.NewClient(o)
		defer rdb.Close()
		insp := asynq.NewInspectorFromRedisClient(rdb)
		for _, q := range []string{prefix + "default", prefix + "high"} {
			_ = insp.DeleteQueue(q, true)
		}
	})

	usage := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"task"}, 2, "cfgd task [command]"},
		{[]string{"task", "run"}, 2, `unknown task command "run"`},
		{[]string{"task", "enqueue", "--type", "nope"}, 2, `unknown task type "nope"`},
		{[]string{"task", "enqueue", "--type", "demo:sleep", "--payload", `{"ms": -1}`}, 2, "ms must be from 0 to 600000"},
		{[]string{"task", "enqueue", "--type", "demo:echo", "--payload", `{`}, 2, "payload must be JSON"},
		{[]string{"task", "enqueue", "--queue", "elsewhere", "--type", "demo:echo"}, 2, `unknown queue "elsewhere"`},
		{[]string{"worker", "now"}, 2, "worker takes no arguments"},
	}
	for _, u := range usage {
		if code, _, msg := runCLI(u.args...); code != u.code || !strings.Contains(msg, u.msg) {
			t.Errorf("%q: exit %d, %q; want %d, %q", u.args, code, msg, u.code, u.msg)
		}
	}

	srv := start(t)
	if code, _, msg := runCLI("user", "create-superuser", "--email", "admin@example.com", "--password", "long enough pw"); code != 0 {
		t.Fatalf("create-superuser: %d %s", code, msg)
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	var wout, werr syncBuffer
	wdone := make(chan error, 1)
	go func() { wdone <- run(wctx, []string{"worker"}, &wout, &werr) }()
	t.Cleanup(func() {
		stopWorker()
		if err := <-wdone; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	code, out, msg := runCLI("task", "enqueue", "--queue", prefix+"high", "--type", "demo:sleep", "--payload", `{"ms": 100}`)
	if code != 0 || !strings.Contains(out, "enqueued demo:sleep on "+prefix+"high: ") {
		t.Fatalf("enqueue: %d %q %s", code, out, msg)
	}
	var stats map[string]any
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		stats = staffGet(t, srv.base+"/api/tasks/task-statistics/")
		if stats["completed_tasks"] == 1.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task never completed: %v\nworker: %s", stats, werr.String())
		}
	}
	if stats["total_tasks"] != 1.0 || stats["success_rate"] != 100.0 {
		t.Fatalf("statistics: %v", stats)
	}
	qs := staffGet(t, srv.base+"/api/tasks/queue-status/")["queues"].([]any)
	if len(qs) != 2 || qs[1].(map[string]any)["name"] != prefix+"high" || qs[1].(map[string]any)["workers"] != 1.0 {
		t.Fatalf("queue-status: %v", qs)
	}
	if !strings.Contains(wout.String(), "cfgd worker "+prefix+"worker serving") {
		t.Fatalf("worker banner: %q", wout.String())
	}
}

func staffGet(t *testing.T, url string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.SetBasicAuth("admin@example.com", "long enough pw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(body, &m) != nil {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return m
}

// task list, inspect and the actions at a prompt: tables and --json, the
// actions carried out by the running serve, refusals named, and a Redis
// that does not answer named within the 3 s.
func TestTaskAdminCommands(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KAFKA__EMBEDDED_ADDR", l.Addr().String())
	_ = l.Close()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "t" + hex.EncodeToString(b) + "-"
	q := prefix + "default"
	t.Setenv("TASKS__QUEUES", q)
	t.Setenv("TASKS__KEY_PREFIX", "cfgd-test:"+prefix)
	t.Cleanup(func() {
		o, _ := redis.ParseURL("redis://127.0.0.1:6379/0")
		rdb := redis.NewClient(o)
		defer rdb.Close()
		_ = asynq.NewInspectorFromRedisClient(rdb).DeleteQueue(q, true)
	})
	start(t)
	ids := make([]string, 2)
	for i := range ids {
		code, out, msg := runCLI("task", "enqueue", "--queue", q, "--type", "demo:echo", "--payload", `{"hello": "cli"}`)
		if code != 0 {
			t.Fatalf("enqueue: %d %s", code, msg)
		}
		ids[i] = out[strings.LastIndex(out, " ")+1 : len(out)-1]
	}
	code, out, msg := runCLI("task", "list", "--queue", q, "--json")
	var listed []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 2 || listed[0]["state"] != "pending" || listed[0]["payload"] != `{"hello": "cli"}` {
		t.Fatalf("list --json: %d %q %s", code, out, msg)
	}
	code, out, msg = runCLI("task", "list", "--state", "pending")
	if code != 0 || !strings.HasPrefix(out, "QUEUE") || !strings.Contains(out, ids[0]) || !strings.Contains(out, `{"hello": "cli"}`) {
		t.Fatalf("list: %d %q %s", code, out, msg)
	}
	code, out, msg = runCLI("task", "inspect", ids[0])
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "STATE pending PAYLOAD {\"hello\": \"cli\"}") || !strings.Contains(out, "archive, delete") {
		t.Fatalf("inspect: %d %q %s", code, out, msg)
	}
	if code, out, msg = runCLI("task", "archive", ids[0]); code != 0 || !strings.Contains(out, "archive done; now archived") {
		t.Fatalf("archive: %d %q %s", code, out, msg)
	}
	if code, _, msg = runCLI("task", "archive", ids[0]); code != 1 || !strings.Contains(msg, "cannot archive a task that is archived") {
		t.Fatalf("archive again: %d %s", code, msg)
	}
	if code, out, msg = runCLI("task", "retry", ids[0], "--json"); code != 0 || !strings.Contains(out, `"state": "pending"`) {
		t.Fatalf("retry: %d %q %s", code, out, msg)
	}
	if code, out, msg = runCLI("task", "delete", ids[1], "--queue", q); code != 0 || !strings.Contains(out, "delete done; it is gone") {
		t.Fatalf("delete: %d %q %s", code, out, msg)
	}
	if code, _, msg = runCLI("task", "inspect", "no-such-task"); code != 1 || !strings.Contains(msg, "not found") {
		t.Fatalf("inspect of nothing: %d %s", code, msg)
	}
	usage := []struct {
		args []string
		msg  string
	}{
		{[]string{"task", "inspect"}, "task inspect takes one task id"},
		{[]string{"task", "delete", "a", "b"}, "task delete takes one task id"},
		{[]string{"task", "list", "--state", "gone"}, "--state: one of pending"},
		{[]string{"task", "list", "--limit", "0"}, "--limit: from 1 to 100"},
	}
	for _, u := range usage {
		if code, _, msg := runCLI(u.args...); code != 2 || !strings.Contains(msg, u.msg) {
			t.Errorf("%q: exit %d, %q; want 2, %q", u.args, code, msg, u.msg)
		}
	}
	// Nothing listens there: named within the 3 s, with the next step.
	t.Setenv("TASKS__REDIS_URL", "redis://127.0.0.1:1/0")
	began := time.Now()
	code, _, msg = runCLI("task", "list")
	if code != 1 || !strings.Contains(msg, "redis at redis://127.0.0.1:1/0 (TASKS__REDIS_URL) is not reachable") || !strings.Contains(msg, "make stack-up") {
		t.Fatalf("list without Redis: %d %s", code, msg)
	}
	if took := time.Since(began); took > 4*time.Second {
		t.Fatalf("list without Redis took %s", took)
	}
}
