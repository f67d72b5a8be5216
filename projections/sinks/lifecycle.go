package sinks

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// LifecycleGroup is the lifecycle sink's consumer group: never rename it.
const LifecycleGroup = "cfgd.tasks.lifecycle"

// Lifecycle consumes the lifecycle topic into task_lifecycle and task_runs, in
// batches of up to MaxBatch records per transaction. Offsets are marked
// only after the batch committed; a batch seen twice changes nothing.
type Lifecycle struct {
	pool     *pgxpool.Pool
	bus      kafka.Config
	log      *slog.Logger
	MaxBatch int
	MaxWait  time.Duration
}

// NewLifecycle returns the sink.
func NewLifecycle(pool *pgxpool.Pool, c kafka.Config, log *slog.Logger) *Lifecycle {
	return &Lifecycle{pool: pool, bus: c, log: log.With("component", "tasks.lifecycle"), MaxBatch: 500, MaxWait: 100 * time.Millisecond}
}

// Run consumes until ctx ends, waiting for Kafka when it is not up yet.
// A batch that fails is retried (never skipped); its offsets are
// committed only after its transaction committed.
func (s *Lifecycle) Run(ctx context.Context) error {
	return kafka.Consume(ctx, s.bus, LifecycleGroup, []string{tasks.TopicLifecycle}, s.handle,
		kafka.WithBatch(s.MaxBatch, s.MaxWait), kafka.WithRetry(50*time.Millisecond, 10*time.Second), kafka.WithLog(s.log))
}

func (s *Lifecycle) handle(ctx context.Context, b *kafka.Batch) error {
	recs := make([]tasks.Lifecycle, 0, len(b.Messages))
	for _, m := range b.Messages {
		var r tasks.Lifecycle
		if err := json.Unmarshal(m.Value, &r); err != nil || r.TaskID == "" || r.Step == "" {
			s.log.ErrorContext(ctx, "skipping unreadable lifecycle record", "partition", m.Partition, "offset", m.Offset)
			continue
		}
		recs = append(recs, r)
	}
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return taskview.ApplyLifecycle(ctx, tx, recs) }); err != nil {
		return fmt.Errorf("lifecycle batch: %w", err)
	}
	return nil
}
