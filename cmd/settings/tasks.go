package settings

import (
	"strings"

	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/deploy/config"
)

// tasksTarget is what the task-queue settings are read into; the queues
// are read as text first and parsed with their weights.
type tasksTarget struct {
	cfg    taskqueues.Config
	queues []string
}

// newTasksTarget starts from taskqueues.DefaultConfig with RedisURL set to
// redisURL (REDIS__URL), the default of TASKS__REDIS_URL.
func newTasksTarget(redisURL string) *tasksTarget {
	t := &tasksTarget{cfg: taskqueues.DefaultConfig()}
	t.cfg.RedisURL = redisURL
	for _, q := range t.cfg.Queues {
		t.queues = append(t.queues, q.Name)
	}
	return t
}

func (t *tasksTarget) fields() []field {
	c := &t.cfg
	return []field{
		urlOf(&c.RedisURL, "TASKS__REDIS_URL", "Redis of the task queues; empty: `REDIS__URL`", "redis", "rediss"),
		intRange(&c.Processes, "TASKS__PROCESSES", "asynq servers per worker process", 1, 64),
		intRange(&c.Threads, "TASKS__THREADS", "tasks at once per server", 1, 1000),
		list(&t.queues, "TASKS__QUEUES", "queues served, each optionally `name:weight` (1-100); weights default to `high` 6, `default` 3, `low` 1, any other 1"),
		intRange(&c.MaxRetries, "TASKS__MAX_RETRIES", "how often a failed task is tried again", 0, 100),
		duration(&c.RetryDelay, "TASKS__RETRY_DELAY", "delay between attempts; `0`: asynq's exponential back-off"),
		str(&c.WorkerID, "TASKS__WORKER_ID", "id addressing this worker process; empty: `<hostname>-<pid>`"),
		str(&c.KeyPrefix, "TASKS__KEY_PREFIX", "prefix of cfgd's own Redis keys (heartbeats, commands)"),
		positive(&c.Heartbeat, "TASKS__HEARTBEAT", "how often a worker writes its state (gone after three missed beats)"),
		positive(&c.CommandPoll, "TASKS__COMMAND_POLL", "how often a worker looks for a start/stop/restart"),
		positive(&c.ShutdownTimeout, "TASKS__SHUTDOWN_TIMEOUT", "how long a stopping worker lets tasks in flight finish before pushing them back"),
		positive(&c.SnapshotTTL, "TASKS__SNAPSHOT_TTL", "how long the live queue snapshot is shared by all callers"),
		positive(&c.ApplyWait, "TASKS__APPLY_WAIT", "how long a queue or worker command waits for its effect before answering 202"),
		duration(&c.Retention, "TASKS__RETENTION", "how long asynq keeps a completed task, listed as completed on the dashboard; `0`: not kept"),
	}
}

// ReadTasks reads the task-queue settings (docs/settings.md has the
// table); problems are left in r. redisURL (REDIS__URL) is the default of
// TASKS__REDIS_URL.
func ReadTasks(r *config.Reader, redisURL string) taskqueues.Config {
	t := newTasksTarget(redisURL)
	readAll(r, t.fields())
	c := t.cfg
	qs, err := taskqueues.ParseQueues(t.queues)
	if err != nil {
		r.Fail("TASKS__QUEUES", "comma-separated queue names, each optionally name:weight (1-100)", strings.Join(t.queues, ","))
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
