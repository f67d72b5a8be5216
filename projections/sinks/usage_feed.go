package sinks

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
)

// UsageFeed is the usage consumer as a replay feed of the API-key projection:
// replaying api_keys from the key events alone would reset the counts
// while consumer_offsets still says they were applied. The feed folds the
// usage topic, from its oldest record, into the shadow api_keys with
// a shadow consumer_offsets, through the consumer's own apply; in the
// swap it catches up to the live consumer's stored offsets and hands its
// offsets to the live consumer, which goes on from there exactly once.
type UsageFeed struct {
	u *Usage
}

var _ projections.Feed = (*UsageFeed)(nil)

// NewUsageFeed returns the feed of the consumer configured by cfg.
func NewUsageFeed(cfg UsageConfig, log *slog.Logger) (*UsageFeed, error) {
	u, err := NewUsage(cfg, nil, log)
	if err != nil {
		return nil, err
	}
	return &UsageFeed{u: u}, nil
}

// Name implements projections.Feed.
func (f *UsageFeed) Name() string { return f.u.cfg.Name }

// Topic implements projections.Feed.
func (f *UsageFeed) Topic() string { return f.u.topic }

// Rebuild implements projections.Feed.
func (f *UsageFeed) Rebuild(ctx context.Context, conn *pgx.Conn, caughtUp func(context.Context) error, progress func(read, total int64)) (int64, error) {
	if err := apikeyview.CreateShadowOffsets(ctx, conn); err != nil {
		return 0, err
	}
	if err := kafka.EnsureTopics(ctx, f.u.cfg.Bus, f.u.log, kafka.TopicAPIKeyUsage); err != nil {
		return 0, err
	}
	r, err := kafka.NewReader(f.u.cfg.Bus)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n, _, err := replay.RebuildFromTopic(ctx, r, conn, f.u.topic, f.u.cfg.BatchRecords, caughtUp, progress, f.apply)
	return n, err
}

func (f *UsageFeed) apply(ctx context.Context, tx pgx.Tx, p int32, msgs []*sarama.ConsumerMessage) error {
	// The rebuilt offsets record the topic they come from, as the live
	// consumer's do (the feed's Usage is its own: session 0 is read once).
	id, err := f.u.topicID(ctx, 0)
	if err != nil {
		return err
	}
	b := &usageBatch{partition: p, topicID: id}
	for _, m := range msgs {
		// A rebuild without it would lack its uses.
		if err := usesSchema(m); err != nil {
			return fmt.Errorf("%s partition %d offset %d: %w", m.Topic, m.Partition, m.Offset, err)
		}
		b.add(f.u, m)
	}
	_, err = f.u.applyTx(ctx, tx, b)
	return err
}

// Lock implements projections.Feed: the live consumer claims its offset
// row before it locks keys, so the swap takes the offsets first.
func (f *UsageFeed) Lock(ctx context.Context, tx pgx.Tx) error {
	return apikeyview.LockLiveOffsets(ctx, tx)
}

// CatchUp implements projections.Feed.
func (f *UsageFeed) CatchUp(ctx context.Context, tx pgx.Tx, schema string) (int64, error) {
	shadow, err := apikeyview.NextOffsets(ctx, tx, schema, f.u.cfg.Name, f.u.topic)
	if err != nil {
		return 0, err
	}
	live, err := apikeyview.NextOffsets(ctx, tx, "public", f.u.cfg.Name, f.u.topic)
	if err != nil {
		return 0, err
	}
	var n int64
	behind := false
	for p, o := range live {
		behind = behind || o > shadow[p]
	}
	if behind {
		r, err := kafka.NewReader(f.u.cfg.Bus)
		if err != nil {
			return 0, err
		}
		defer r.Close()
		_, err = r.Read(ctx, f.u.topic, shadow, live, f.u.cfg.BatchRecords, func(ctx context.Context, p int32, msgs []*sarama.ConsumerMessage) error {
			n += int64(len(msgs))
			return f.apply(ctx, tx, p, msgs)
		})
		if err != nil {
			return n, err
		}
	}
	if err := apikeyview.HandOverOffsets(ctx, tx, schema, f.u.cfg.Name, f.u.topic); err != nil {
		return n, err
	}
	return n, nil
}
