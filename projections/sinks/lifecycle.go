package sinks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/signing"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// LifecycleGroup is the lifecycle sink's consumer group: never rename it.
const LifecycleGroup = "cfgd.tasks.lifecycle"

// Lifecycle consumes the lifecycle topic into task_lifecycle and task_runs, in
// batches of up to MaxBatch records per transaction. Offsets are marked
// only after the batch committed; a batch seen twice changes nothing. A
// record whose signature is missing or wrong (forged by someone who can
// reach the broker but lacks the event signing key) goes to the
// dead-letter topic with reason bad_signature and is never counted.
type Lifecycle struct {
	pool     *pgxpool.Pool
	bus      kafka.Config
	signer   *events.Signer
	log      *slog.Logger
	MaxBatch int
	MaxWait  time.Duration
	// Cutover accepts the unsigned records an older cfgd wrote, below
	// the topic's signing watermark (nil: every record must be signed).
	Cutover *signing.Cutover
	metrics *Metrics
	// waiting is why the sink waits for a newer cfgd (a record format
	// newer than this build's).
	waiting process.Health
}

// Ready fails while the sink holds a partition at a record only a newer
// cfgd understands.
func (s *Lifecycle) Ready(ctx context.Context) error { return s.waiting.Ready(ctx) }

// NewLifecycle returns the sink; signer verifies every record.
func NewLifecycle(pool *pgxpool.Pool, c kafka.Config, signer *events.Signer, log *slog.Logger) *Lifecycle {
	return &Lifecycle{pool: pool, bus: c, signer: signer, log: log.With("component", "tasks.lifecycle"), MaxBatch: 500, MaxWait: 100 * time.Millisecond}
}

// Run consumes until ctx ends, waiting for Kafka when it is not up yet.
// A batch that fails is retried (never skipped); its offsets are
// committed only after its transaction committed.
func (s *Lifecycle) Run(ctx context.Context) error {
	return kafka.Consume(ctx, s.bus, LifecycleGroup, []string{tasks.TopicLifecycle}, s.handle,
		kafka.WithBatch(s.MaxBatch, s.MaxWait), kafka.WithRetry(50*time.Millisecond, 10*time.Second), kafka.WithLog(s.log),
		kafka.WithDeadLetter(kafka.TopicDeadLetters), kafka.WithMetrics(s.metrics.registerer()), kafka.WithSetup(s.Cutover.Start),
		kafka.WithWaiting(&s.waiting))
}

func (s *Lifecycle) handle(ctx context.Context, b *kafka.Batch) error {
	if err := s.Cutover.Session(ctx, b.Session); err != nil {
		return err
	}
	recs := make([]tasks.Lifecycle, 0, len(b.Messages))
	var newer error
	var at *sarama.ConsumerMessage
	for _, m := range b.Messages {
		r, err := lifecycleRecord(s.signer, s.Cutover, m)
		var ns *events.ErrNewerSchema
		if errors.As(err, &ns) {
			// Applied up to it; it waits for a newer member of the group.
			newer, at = err, m
			break
		}
		switch {
		case errors.Is(err, events.ErrBadSignature):
			if err := b.DeadLetter(ctx, m, LifecycleGroup, kafka.ReasonBadSignature, err); err != nil {
				return err
			}
			s.metrics.deadLettered(SinkLifecycle, kafka.ReasonBadSignature)
			continue
		case err != nil:
			s.log.ErrorContext(ctx, "skipping unreadable lifecycle record", "partition", m.Partition, "offset", m.Offset)
			continue
		}
		recs = append(recs, r)
	}
	if err := s.metrics.write(SinkLifecycle, len(recs), func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return taskview.ApplyLifecycle(ctx, tx, recs) })
	}); err != nil {
		return fmt.Errorf("lifecycle batch: %w", err)
	}
	if newer != nil {
		return kafka.Yield(newer, at)
	}
	return nil
}

// errUnreadable is a signed record that does not decode as a step.
var errUnreadable = errors.New("unreadable lifecycle record")

// lifecycleRecord verifies (unsigned below cut's watermark) and decodes
// one record, as the sink and the replay feed read it; a record of a newer
// format is *events.ErrNewerSchema.
func lifecycleRecord(signer *events.Signer, cut *signing.Cutover, m *sarama.ConsumerMessage) (tasks.Lifecycle, error) {
	var r tasks.Lifecycle
	if err := cut.Verify(signer, m); err != nil {
		return r, err
	}
	if err := events.CheckFormat(tasks.LifecycleFormat, events.ParseSchemaHeader(header(m, events.HeaderSchemaVersion)), tasks.LifecycleVersion); err != nil {
		return r, err
	}
	if err := json.Unmarshal(m.Value, &r); err != nil || r.TaskID == "" || r.Step == "" {
		return r, errUnreadable
	}
	return r, nil
}
