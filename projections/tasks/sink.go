package tasks

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

	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// SinkGroup is the lifecycle sink's consumer group: never rename it.
const SinkGroup = "cfgd.tasks.lifecycle"

// Sink consumes the lifecycle topic into task_lifecycle and task_runs, in
// batches of up to MaxBatch records per transaction. Offsets are marked
// only after the batch committed; a batch seen twice changes nothing.
type Sink struct {
	pool     *pgxpool.Pool
	bus      kafka.Config
	log      *slog.Logger
	MaxBatch int
	MaxWait  time.Duration
}

// NewSink returns the sink.
func NewSink(pool *pgxpool.Pool, c kafka.Config, log *slog.Logger) *Sink {
	return &Sink{pool: pool, bus: c, log: log.With("component", "tasks.lifecycle"), MaxBatch: 500, MaxWait: 100 * time.Millisecond}
}

// Run consumes until ctx ends, waiting for Kafka when it is not up yet.
func (s *Sink) Run(ctx context.Context) error {
	var group sarama.ConsumerGroup
	for backoff := 250 * time.Millisecond; ; backoff = min(2*backoff, 10*time.Second) {
		err := kafka.EnsureTopics(ctx, s.bus, s.log, tasks.TopicLifecycle)
		if err == nil {
			group, err = sarama.NewConsumerGroup(s.bus.Brokers, SinkGroup, s.bus.ConsumerSarama())
		}
		if err == nil {
			break
		}
		s.log.WarnContext(ctx, "dependency unavailable, retrying", "dependency", "kafka", "err", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
	defer group.Close()
	go func() {
		for err := range group.Errors() {
			s.log.Warn("lifecycle consumer", "err", err)
		}
	}()
	topic := s.bus.Topic(tasks.TopicLifecycle)
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{topic}, s); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) && ctx.Err() == nil {
			s.log.Warn("lifecycle consume", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// Setup implements sarama.ConsumerGroupHandler.
func (s *Sink) Setup(sarama.ConsumerGroupSession) error { return nil }

// Cleanup implements sarama.ConsumerGroupHandler.
func (s *Sink) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim applies one partition's records batch by batch.
func (s *Sink) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	ctx := sess.Context()
	msgs := claim.Messages()
	for {
		var batch []*sarama.ConsumerMessage
		select {
		case m, ok := <-msgs:
			if !ok {
				return nil
			}
			batch = append(batch, m)
		case <-ctx.Done():
			return nil
		}
		timer := time.NewTimer(s.MaxWait)
	fill:
		for len(batch) < s.MaxBatch {
			select {
			case m, ok := <-msgs:
				if !ok {
					break fill
				}
				batch = append(batch, m)
			case <-timer.C:
				break fill
			}
		}
		timer.Stop()
		if err := s.apply(ctx, batch); err != nil {
			// Never skip: the session ends and the batch comes again.
			return err
		}
		sess.MarkMessage(batch[len(batch)-1], "")
	}
}

func (s *Sink) apply(ctx context.Context, batch []*sarama.ConsumerMessage) error {
	recs := make([]tasks.Lifecycle, 0, len(batch))
	for _, m := range batch {
		var r tasks.Lifecycle
		if err := json.Unmarshal(m.Value, &r); err != nil || r.TaskID == "" || r.Step == "" {
			s.log.Error("skipping unreadable lifecycle record", "partition", m.Partition, "offset", m.Offset)
			continue
		}
		recs = append(recs, r)
	}
	for attempt := 0; ; attempt++ {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return taskview.ApplyLifecycle(ctx, tx, recs) })
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || attempt >= 8 {
			return fmt.Errorf("lifecycle batch: %w", err)
		}
		s.log.Warn("lifecycle batch, retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		}
	}
}
