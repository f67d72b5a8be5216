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
