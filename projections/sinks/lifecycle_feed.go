package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/signing"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/projectors"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// LifecycleFeed is the lifecycle sink as a replay feed of the task views:
// it folds the lifecycle topic, from its oldest record, into the shadow
// task_lifecycle and task_runs with the sink's own statements. The sink
// applies idempotently (a step recorded once stays recorded once) and
// keeps its position as Kafka offsets, so the swap only has to read what
// arrived since the rebuild; the sink, blocked by the swap's locks, then
// applies its batch to the new tables as a no-op or as news.
type LifecycleFeed struct {
	bus    kafka.Config
	signer *events.Signer
	cut    *signing.Cutover
	log    *slog.Logger
	batch  int
	// next is where the rebuild stopped reading, per partition.
	next map[int32]int64
}

var _ projections.Feed = (*LifecycleFeed)(nil)

// NewLifecycleFeed returns the feed over c's lifecycle topic; signer
// verifies every record, as the sink does, and cut accepts the unsigned
// ones below its watermark (nil: none).
func NewLifecycleFeed(c kafka.Config, signer *events.Signer, cut *signing.Cutover, log *slog.Logger) *LifecycleFeed {
	return &LifecycleFeed{bus: c, signer: signer, cut: cut, log: log, batch: 500}
}

// ViewsWithLifecycle is the task views' projection carrying the
// lifecycle feed, as replay runs it.
func ViewsWithLifecycle(c kafka.Config, signer *events.Signer, cut *signing.Cutover, log *slog.Logger) *projections.Projection {
	p := projectors.TaskQueues()
	p.Feeds = append(p.Feeds, NewLifecycleFeed(c, signer, cut, log))
	return p
}

// Name implements projections.Feed.
func (f *LifecycleFeed) Name() string { return "tasks.lifecycle" }

// Topic implements projections.Feed.
func (f *LifecycleFeed) Topic() string { return f.bus.Topic(tasks.TopicLifecycle) }

// Rebuild implements projections.Feed.
func (f *LifecycleFeed) Rebuild(ctx context.Context, conn *pgx.Conn, caughtUp func(context.Context) error, progress func(read, total int64)) (int64, error) {
	f.next = nil
	if err := kafka.EnsureTopics(ctx, f.bus, f.log, tasks.TopicLifecycle); err != nil {
		return 0, err
	}
	if err := f.cut.Start(ctx); err != nil {
		return 0, err
	}
	r, err := kafka.NewReader(f.bus)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n, next, err := replay.RebuildFromTopic(ctx, r, conn, f.bus.Topic(tasks.TopicLifecycle), f.batch, caughtUp, progress,
		func(ctx context.Context, tx pgx.Tx, _ int32, msgs []*sarama.ConsumerMessage) error {
			recs, err := f.decode(msgs)
			if err != nil {
				return err
			}
			return taskview.ApplyLifecycle(ctx, tx, recs)
		})
	if err == nil {
		f.next = next
	}
	return n, err
}

// decode reads msgs as the sink does, skipping what it skips (the sink
// dead-lettered the forged records already). A record only a newer cfgd
// understands fails the replay: a rebuild without it would lack it.
func (f *LifecycleFeed) decode(msgs []*sarama.ConsumerMessage) ([]tasks.Lifecycle, error) {
	recs := make([]tasks.Lifecycle, 0, len(msgs))
	for _, m := range msgs {
		r, err := lifecycleRecord(f.signer, f.cut, m)
		var ns *events.ErrNewerSchema
		if errors.As(err, &ns) {
			return nil, fmt.Errorf("%s partition %d offset %d: %w", m.Topic, m.Partition, m.Offset, err)
		}
		if err != nil {
			continue
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// Lock implements projections.Feed: the sink writes only the tables the
// swap locks.
func (f *LifecycleFeed) Lock(context.Context, pgx.Tx) error { return nil }

// CatchUp implements projections.Feed: with the sink blocked, everything
// it applied is below the topic's end now; the shadow reads up to there.
func (f *LifecycleFeed) CatchUp(ctx context.Context, tx pgx.Tx, _ string) (int64, error) {
	r, err := kafka.NewReader(f.bus)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	topic := f.bus.Topic(tasks.TopicLifecycle)
	ends, err := r.Ends(topic)
	if err != nil {
		return 0, err
	}
	var n int64
	_, err = r.Read(ctx, topic, f.next, ends, f.batch, func(ctx context.Context, _ int32, msgs []*sarama.ConsumerMessage) error {
		n += int64(len(msgs))
		recs, err := f.decode(msgs)
		if err != nil {
			return err
		}
		return taskview.ApplyLifecycle(ctx, tx, recs)
	})
	return n, err
}
