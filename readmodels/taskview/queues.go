package taskview

import (
	"context"
	"fmt"
	"time"
)

// Execer runs one write statement; projections.Tx is one. The tasks.queues
// projector writes the queue and worker views only through the functions
// below, so the statements live with the tables' owner.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) error
}

// saveQueueSQL sets a queue's pause flag and last action.
const saveQueueSQL = `
	INSERT INTO task_queues (name, is_paused, last_action, cleared, version, updated_at) VALUES ($1, $2, $3, 0, $4, $5)
	ON CONFLICT (name) DO UPDATE SET is_paused = excluded.is_paused, last_action = excluded.last_action,
		version = excluded.version, updated_at = excluded.updated_at`

// SaveQueue records a pause or resume of queue name at stream version.
func SaveQueue(ctx context.Context, db Execer, name string, paused bool, action string, version int64, at time.Time) error {
	if err := db.Exec(ctx, saveQueueSQL, name, paused, action, version, at); err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	return nil
}

// clearQueueSQL records a clear; the pause flag is whatever it was.
const clearQueueSQL = `
	INSERT INTO task_queues (name, is_paused, last_action, cleared, version, updated_at) VALUES ($1, false, $2, 0, $3, $4)
	ON CONFLICT (name) DO UPDATE SET last_action = excluded.last_action, version = excluded.version, updated_at = excluded.updated_at`

// SaveQueueCleared records that a clear of queue name was asked (action
// clear) at stream version; the pause flag stays.
func SaveQueueCleared(ctx context.Context, db Execer, name, action string, version int64, at time.Time) error {
	if err := db.Exec(ctx, clearQueueSQL, name, action, version, at); err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	return nil
}

// addClearedSQL adds a clear's removed tasks to the queue's total.
const addClearedSQL = `
	INSERT INTO task_queues (name, is_paused, last_action, cleared, version, updated_at) VALUES ($1, false, $2, $3, $4, $5)
	ON CONFLICT (name) DO UPDATE SET cleared = task_queues.cleared + excluded.cleared, version = excluded.version`

// AddQueueCleared adds removed tasks to queue name's cleared total at
// stream version.
func AddQueueCleared(ctx context.Context, db Execer, name, action string, removed int, version int64, at time.Time) error {
	if err := db.Exec(ctx, addClearedSQL, name, action, removed, version, at); err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	return nil
}

// saveWorkerCommandSQL keeps a worker's last command.
const saveWorkerCommandSQL = `
	INSERT INTO task_worker_commands (worker_id, action, version, requested_at) VALUES ($1, $2, $3, $4)
	ON CONFLICT (worker_id) DO UPDATE SET action = excluded.action, version = excluded.version, requested_at = excluded.requested_at`

// SaveWorkerCommand records the command action sent to worker id at
// stream version.
func SaveWorkerCommand(ctx context.Context, db Execer, id, action string, version int64, at time.Time) error {
	if err := db.Exec(ctx, saveWorkerCommandSQL, id, action, version, at); err != nil {
		return fmt.Errorf("worker %s: %w", id, err)
	}
	return nil
}
