package taskqueues

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/cfgd/cfgd/deploy/config"
)

// Queue is one configured queue and its weight: a worker takes tasks from
// a queue with a probability proportional to its weight (asynq's weighted
// priority), so low queues are never starved.
type Queue struct {
	Name     string
	Priority int
}

// DefaultQueues are high (6), default (3) and low (1).
func DefaultQueues() []Queue {
	return []Queue{{"default", 3}, {"high", 6}, {"low", 1}}
}

// DefaultPriority of a queue listed without a weight whose name is not one
// of the default queues.
const DefaultPriority = 1

// ParseQueues reads "name[:weight]" items; names without a weight get the
// default queue's weight, or DefaultPriority.
func ParseQueues(items []string) ([]Queue, error) {
	defaults := map[string]int{}
	for _, q := range DefaultQueues() {
		defaults[q.Name] = q.Priority
	}
	var out []Queue
	var errs []error
	for _, it := range items {
		name, w, hasW := strings.Cut(strings.TrimSpace(it), ":")
		p, ok := defaults[name]
		if !ok {
			p = DefaultPriority
		}
		if hasW {
			n, err := strconv.Atoi(w)
			if err != nil || n < 1 || n > 100 {
				errs = append(errs, fmt.Errorf("queue %q: weight must be an integer from 1 to 100", it))
				continue
			}
			p = n
		}
		out = append(out, Queue{Name: name, Priority: p})
	}
	return out, errors.Join(errs...)
}

// Config of the task capability.
type Config struct {
	// RedisURL is where asynq keeps its queues (redis://host:port/db). It
	// has no default of its own: cmd/settings fills it from TASKS__REDIS_URL,
	// else REDIS__URL, whose default is written there once.
	RedisURL string
	// Processes is how many task servers one worker process runs.
	Processes int
	// Threads is how many tasks each server runs at once.
	Threads int
	// Queues the workers serve and the API lists.
	Queues []Queue
	// MaxRetries is how often a failed task is tried again.
	MaxRetries int
	// RetryDelay between attempts of a failed task; 0: asynq's
	// exponential back-off (seconds growing to hours).
	RetryDelay time.Duration
	// WorkerID addresses this worker process; empty: DefaultWorkerID().
	WorkerID string
	// KeyPrefix prefixes cfgd's own Redis keys (heartbeats, commands).
	KeyPrefix string
	// Heartbeat is how often a worker writes its state; it is considered
	// gone after three missed beats.
	Heartbeat time.Duration
	// CommandPoll is how often a worker looks for a start/stop/restart.
	CommandPoll time.Duration
	// ShutdownTimeout is how long a stopping server lets tasks in flight
	// finish before it pushes them back to their queue.
	ShutdownTimeout time.Duration
	// SnapshotTTL is how long the live queue snapshot is cached (the
	// dashboard's poll interval).
	SnapshotTTL time.Duration
	// ApplyWait bounds how long a command waits for its effect before
	// answering 202.
	ApplyWait time.Duration
	// Retention is how long asynq keeps a completed task (to list it);
	// 0: it is dropped once done.
	Retention time.Duration
}

// DefaultConfig is the documented defaults (RedisURL left to the caller).
func DefaultConfig() Config {
	return Config{
		Processes:       1,
		Threads:         8,
		Queues:          DefaultQueues(),
		MaxRetries:      3,
		KeyPrefix:       "cfgd:tasks:",
		Heartbeat:       2 * time.Second,
		CommandPoll:     500 * time.Millisecond,
		ShutdownTimeout: 8 * time.Second,
		SnapshotTTL:     5 * time.Second,
		ApplyWait:       10 * time.Second,
		Retention:       time.Hour,
	}
}

// DefaultWorkerID is host-pid: unique per process on one machine and
// readable in the dashboard.
func DefaultWorkerID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "worker"
	}
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)

// ValidName tells whether s can be a queue name or worker id: it becomes
// part of a stream id and Redis keys.
func ValidName(s string) bool { return idPattern.MatchString(s) }

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if _, err := asynq.ParseRedisURI(c.RedisURL); err != nil {
		errs = append(errs, fmt.Errorf("tasks: redis url: %w", config.RedactError(err, c.RedisURL)))
	}
	if c.Processes < 1 {
		errs = append(errs, errors.New("tasks: processes must be at least 1"))
	}
	if c.Threads < 1 {
		errs = append(errs, errors.New("tasks: threads must be at least 1"))
	}
	if c.MaxRetries < 0 {
		errs = append(errs, errors.New("tasks: max retries must not be negative"))
	}
	if c.Retention < 0 {
		errs = append(errs, errors.New("tasks: retention must not be negative"))
	}
	if c.RetryDelay < 0 {
		errs = append(errs, errors.New("tasks: retry delay must not be negative"))
	}
	if len(c.Queues) == 0 {
		errs = append(errs, errors.New("tasks: at least one queue"))
	}
	seen := map[string]bool{}
	for _, q := range c.Queues {
		if !ValidName(q.Name) {
			errs = append(errs, fmt.Errorf("tasks: queue name %q: letters, digits, . _ : - only, at most 100", q.Name))
		}
		if seen[q.Name] {
			errs = append(errs, fmt.Errorf("tasks: queue %q listed twice", q.Name))
		}
		seen[q.Name] = true
		if q.Priority < 1 {
			errs = append(errs, fmt.Errorf("tasks: queue %q: priority must be at least 1", q.Name))
		}
	}
	if c.WorkerID != "" && !ValidName(c.WorkerID) {
		errs = append(errs, fmt.Errorf("tasks: worker id %q: letters, digits, . _ : - only, at most 100", c.WorkerID))
	}
	for name, d := range map[string]time.Duration{"heartbeat": c.Heartbeat, "command poll": c.CommandPoll, "shutdown timeout": c.ShutdownTimeout, "snapshot ttl": c.SnapshotTTL, "apply wait": c.ApplyWait} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("tasks: %s must be positive", name))
		}
	}
	return errors.Join(errs...)
}

// HasQueue tells whether name is configured.
func (c Config) HasQueue(name string) bool {
	for _, q := range c.Queues {
		if q.Name == name {
			return true
		}
	}
	return false
}

// QueueNames lists the configured queue names in order.
func (c Config) QueueNames() []string {
	out := make([]string, len(c.Queues))
	for i, q := range c.Queues {
		out[i] = q.Name
	}
	return out
}

func (c Config) AsynqQueues() map[string]int {
	m := make(map[string]int, len(c.Queues))
	for _, q := range c.Queues {
		m[q.Name] = q.Priority
	}
	return m
}

// RedisOpt is asynq's connection option for c.RedisURL.
func (c Config) RedisOpt() (asynq.RedisConnOpt, error) {
	o, err := asynq.ParseRedisURI(c.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("tasks: redis url: %w", config.RedactError(err, c.RedisURL))
	}
	return o, nil
}
