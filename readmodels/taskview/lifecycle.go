package taskview

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events/tasks"
)

// rank orders steps: later attempts after earlier ones, an attempt's
// outcome after its start, an archive after the attempts it follows (and
// before a later run of the task), and an end (succeeded, failed,
// cleared) after everything. A delete ends a task too, but never
// overwrites its finish: deleting a completed task keeps it succeeded.
func rank(step string, attempt int) int64 {
	switch step {
	case tasks.StepSucceeded, tasks.StepFailed, tasks.StepCleared:
		return 1 << 40
	case tasks.StepDeleted:
		return 1<<40 - 1
	case tasks.StepArchived:
		return int64(attempt)*10 + 3
	case tasks.StepStarted:
		return int64(attempt)*10 + 1
	case tasks.StepRetried:
		return int64(attempt)*10 + 2
	}
	return 0
}

// lifecycleSQL records one lifecycle step; a step already recorded changes
// nothing, so a redelivered record is harmless.
const lifecycleSQL = `
			WITH step AS (
				INSERT INTO task_lifecycle (task_id, step, attempt, queue, type, worker_id, error, at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				ON CONFLICT DO NOTHING
				RETURNING task_id
			)
			INSERT INTO task_runs AS r (task_id, queue, type, state, rank, attempts, worker_id, error, enqueued_at, finished_at, updated_at)
			SELECT $1, $4, $5, $2, $9, $3, $6, $7, $10, $11, $8 FROM step
			ON CONFLICT (task_id) DO UPDATE SET
				queue = excluded.queue, type = excluded.type,
				state = CASE WHEN excluded.rank >= r.rank THEN excluded.state ELSE r.state END,
				error = CASE WHEN excluded.rank >= r.rank AND excluded.error <> '' THEN excluded.error ELSE r.error END,
				worker_id = CASE WHEN excluded.worker_id <> '' THEN excluded.worker_id ELSE r.worker_id END,
				rank = greatest(r.rank, excluded.rank),
				attempts = greatest(r.attempts, excluded.attempts),
				enqueued_at = coalesce(r.enqueued_at, excluded.enqueued_at),
				finished_at = coalesce(r.finished_at, excluded.finished_at),
				updated_at = greatest(r.updated_at, excluded.updated_at)`

func lifecycleArgs(r tasks.Lifecycle) []any {
	at := r.At
	if at.IsZero() {
		at = time.Now().UTC()
	}
	var enq, fin *time.Time
	if r.Step == tasks.StepEnqueued {
		enq = &at
	}
	if tasks.Terminal(r.Step) || r.Step == tasks.StepCleared || r.Step == tasks.StepDeleted {
		fin = &at
	}
	return []any{r.TaskID, r.Step, r.Attempt, r.Queue, r.Type, r.WorkerID, r.Error, at, rank(r.Step, r.Attempt), enq, fin}
}

// Batcher sends a batch of statements in one round trip; pgx.Tx and
// *pgx.Conn are ones.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ApplyLifecycle records recs through tx (the lifecycle sink's and the
// replay feed's transaction), in one round trip.
func ApplyLifecycle(ctx context.Context, tx Batcher, recs []tasks.Lifecycle) error {
	if len(recs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, r := range recs {
		b.Queue(lifecycleSQL, lifecycleArgs(r)...)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("task lifecycle: %w", err)
	}
	return nil
}
