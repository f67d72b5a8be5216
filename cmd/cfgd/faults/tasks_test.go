package faults

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// TestSIGKILLOfAWorkerMidTask kills `cfgd worker` with SIGKILL while a
// task runs, then starts another worker: asynq's lease recovery (no
// handler runs, so nothing of cfgd's) either retries the task or, on its
// last attempt, archives it. The statistics must follow: with a retry
// left, the cut attempt is closed as retried and the task succeeds on the
// next; without, the task ends failed. Never "started" forever.
func TestSIGKILLOfAWorkerMidTask(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, retries, state, steps string
	}{
		{"retried", "1", "succeeded", "enqueued/0 started/1 retried/1 started/2 succeeded/2"},
		{"last attempt", "0", "failed", "enqueued/0 started/1 failed/1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, env := startBroker(t)
			_, redisURL := startRedis(t)
			env["REDIS__URL"] = redisURL
			env["POSTGRES__URL"] = testenv.PostgresURL(t)
			env["CLICKHOUSE__URL"] = localClickHouse(t)
			env["TASKS__MAX_RETRIES"] = tc.retries
			env["TASKS__RETRY_DELAY"] = "100ms"
			env["TASKS__HEARTBEAT"] = "500ms"
			c := newCfgd(t, env)
			c.run("migrate")
			c.start()
			c.waitReady(60 * time.Second)
			pg := openPostgres(t, env["POSTGRES__URL"])

			w1 := c.worker("w1")
			out := c.run("task", "enqueue", "--queue", "default", "--type", "demo:sleep", "--payload", `{"ms": 6000}`)
			id := strings.TrimSpace(out[strings.LastIndex(out, ":")+1:])
			state := func() (string, error) {
				var s string
				err := pg.QueryRow(context.Background(), `SELECT state FROM task_runs WHERE task_id = $1`, id).Scan(&s)
				return s, err
			}
			eventually(t, "the task runs", 30*time.Second, func() error {
				if s, err := state(); err != nil || s != "started" {
					return fmt.Errorf("state %q: %v", s, err)
				}
				return nil
			})
			c.logs.mark("SIGKILL worker")
			w1.signal(t, syscall.SIGKILL, 10*time.Second)
			c.worker("w2")
			// asynq takes the lease back 30s after it expired (30s
			// after the kill), at its recoverer's next round (every
			// minute).
			eventually(t, "the task ends "+tc.state, 3*time.Minute, func() error {
				if s, err := state(); err != nil || s != tc.state {
					return fmt.Errorf("state %q: %v", s, err)
				}
				return nil
			})
			rows, err := pg.Query(context.Background(), `SELECT step || '/' || attempt FROM task_lifecycle WHERE task_id = $1 ORDER BY attempt, CASE step WHEN 'enqueued' THEN 0 WHEN 'started' THEN 1 ELSE 2 END`, id)
			if err != nil {
				t.Fatal(err)
			}
			var steps []string
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				steps = append(steps, s)
			}
			if got := strings.Join(steps, " "); got != tc.steps {
				t.Fatalf("steps %q, want %q", got, tc.steps)
			}
		})
	}
}

// worker starts `cfgd worker` with id; it is killed when the test ends.
func (c *cfgd) worker(id string) *proc {
	c.t.Helper()
	cmd := exec.Command(c.bin, "worker")
	cmd.Env = append(append([]string{}, c.env...), "TASKS__WORKER_ID="+id)
	cmd.Stdout, cmd.Stderr = c.logs, c.logs
	c.logs.mark("cfgd worker " + id)
	p := startProc(c.t, cmd)
	c.t.Cleanup(func() { p.signal(c.t, syscall.SIGKILL, 10*time.Second) })
	return p
}
