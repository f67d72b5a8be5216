package settings

import (
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/deploy/config"
)

func TestReadTasks(t *testing.T) {
	cases := []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, c taskqueues.Config)
		errs  []string
	}{
		{"defaults", nil, func(t *testing.T, c taskqueues.Config) {
			if c.RedisURL != "redis://core:6379/2" || c.Processes != 1 || c.Threads != 8 || c.MaxRetries != 3 || c.WorkerID != "" ||
				len(c.Queues) != 3 || c.Queues[1] != (taskqueues.Queue{Name: "high", Priority: 6}) || c.Heartbeat != 2*time.Second || c.SnapshotTTL != 5*time.Second {
				t.Fatalf("defaults: %+v", c)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"the spec's example", map[string]string{"TASKS__REDIS_URL": "redis://q:6379/1", "TASKS__PROCESSES": "4", "TASKS__THREADS": "8",
			"TASKS__QUEUES": "default, high, low", "TASKS__MAX_RETRIES": "3", "TASKS__WORKER_ID": "box-1"}, func(t *testing.T, c taskqueues.Config) {
			if c.RedisURL != "redis://q:6379/1" || c.Processes != 4 || c.Threads != 8 || c.WorkerID != "box-1" || strings.Join(c.QueueNames(), ",") != "default,high,low" {
				t.Fatalf("%+v", c)
			}
		}, nil},
		{"bad values", map[string]string{"TASKS__REDIS_URL": "http://x", "TASKS__PROCESSES": "0", "TASKS__QUEUES": "a:0,b c",
			"TASKS__WORKER_ID": "no spaces please", "TASKS__HEARTBEAT": "soon"}, nil,
			[]string{"TASKS__REDIS_URL", "TASKS__PROCESSES", "TASKS__QUEUES", "TASKS__WORKER_ID", "TASKS__HEARTBEAT"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := config.NewReader(config.FromMaps(c.env, nil))
			got := ReadTasks(r, "redis://core:6379/2")
			err := r.Err()
			if len(c.errs) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				c.check(t, got)
				return
			}
			for _, name := range c.errs {
				if err == nil || !strings.Contains(err.Error(), name) {
					t.Errorf("error %v does not name %s", err, name)
				}
			}
		})
	}
}
