package settings

import (
	"fmt"

	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/deploy/config"
)

// ReadTasks reads the task-queue settings (README.md, Task queues, has the
// table); problems are left in r. redisURL (REDIS__URL) is the default of
// TASKS__REDIS_URL.
func ReadTasks(r *config.Reader, redisURL string) taskqueues.Config {
	d := taskqueues.DefaultConfig()
	c := taskqueues.Config{
		RedisURL:        r.URL("TASKS__REDIS_URL", redisURL, "redis", "rediss"),
		Processes:       r.IntRange("TASKS__PROCESSES", d.Processes, 1, 64),
		Threads:         r.IntRange("TASKS__THREADS", d.Threads, 1, 1000),
		MaxRetries:      r.IntRange("TASKS__MAX_RETRIES", d.MaxRetries, 0, 100),
		RetryDelay:      r.Duration("TASKS__RETRY_DELAY", 0),
		WorkerID:        r.String("TASKS__WORKER_ID", ""),
		KeyPrefix:       r.String("TASKS__KEY_PREFIX", d.KeyPrefix),
		Heartbeat:       r.PositiveDuration("TASKS__HEARTBEAT", d.Heartbeat),
		CommandPoll:     r.PositiveDuration("TASKS__COMMAND_POLL", d.CommandPoll),
		ShutdownTimeout: r.PositiveDuration("TASKS__SHUTDOWN_TIMEOUT", d.ShutdownTimeout),
		SnapshotTTL:     r.PositiveDuration("TASKS__SNAPSHOT_TTL", d.SnapshotTTL),
		ApplyWait:       r.PositiveDuration("TASKS__APPLY_WAIT", d.ApplyWait),
	}
	qs, err := taskqueues.ParseQueues(r.List("TASKS__QUEUES", []string{"default", "high", "low"}))
	if err != nil {
		r.Fail("TASKS__QUEUES", "comma-separated queue names, each optionally name:weight (1-100)", fmt.Sprint(r.List("TASKS__QUEUES", nil)))
	}
	c.Queues = qs
	if c.WorkerID != "" && !taskqueues.ValidName(c.WorkerID) {
		r.Fail("TASKS__WORKER_ID", "letters, digits, . _ : - (at most 100)", c.WorkerID)
	}
	for _, q := range qs {
		if !taskqueues.ValidName(q.Name) {
			r.Fail("TASKS__QUEUES", "queue names of letters, digits, . _ : - (at most 100)", q.Name)
		}
	}
	return c
}
