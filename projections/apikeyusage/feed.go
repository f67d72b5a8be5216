package apikeyusage

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/replay"
)

// Feed is the usage consumer as a replay feed of the API-key projection:
// replaying api_keys from the key events alone would reset the counts
// while consumer_offsets still says they were applied. The feed folds the
// request-log topic, from its oldest record, into the shadow api_keys with
// a shadow consumer_offsets, through the consumer's own apply; in the
// swap it catches up to the live consumer's stored offsets and hands its
// offsets to the live consumer, which goes on from there exactly once.
type Feed struct {
	u *Usage
}

var _ projections.Feed = (*Feed)(nil)

// NewFeed returns the feed of the consumer configured by cfg.
func NewFeed(cfg Config, log *slog.Logger) (*Feed, error) {
	u, err := New(cfg, nil, log)
	if err != nil {
		return nil, err
	}
	return &Feed{u: u}, nil
}

// Name implements projections.Feed.
func (f *Feed) Name() string { return f.u.cfg.Name }

// Topic implements projections.Feed.
func (f *Feed) Topic() string { return f.u.topic }

func (f *Feed) client() (sarama.Client, error) {
	c, err := sarama.NewClient(f.u.cfg.Bus.Brokers, f.u.cfg.Bus.ConsumerSarama())
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return c, nil
}

// Rebuild implements projections.Feed.
func (f *Feed) Rebuild(ctx context.Context, conn *pgx.Conn, caughtUp func(context.Context) error, progress func(read, total int64)) (int64, error) {
	// Unqualified: created in the shadow schema, first on the search_path.
	if _, err := conn.Exec(ctx, `CREATE TABLE consumer_offsets (LIKE public.consumer_offsets INCLUDING ALL)`); err != nil {
		return 0, fmt.Errorf("shadow consumer_offsets: %w", err)
	}
	if err := kafka.EnsureTopics(ctx, f.u.cfg.Bus, f.u.log, kafka.TopicRequestLogs); err != nil {
		return 0, err
	}
	c, err := f.client()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	n, _, err := replay.RebuildFromTopic(ctx, c, conn, f.u.topic, f.u.cfg.BatchRecords, caughtUp, progress, f.apply)
	return n, err
}

func (f *Feed) apply(ctx context.Context, tx pgx.Tx, p int32, msgs []*sarama.ConsumerMessage) error {
	b := &batch{partition: p}
	for _, m := range msgs {
		b.add(f.u, m)
	}
	_, err := f.u.applyTx(ctx, tx, b)
	return err
}

// Lock implements projections.Feed: the live consumer claims its offset
// row before it locks keys, so the swap takes the offsets first.
func (f *Feed) Lock(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `LOCK TABLE public.consumer_offsets IN SHARE ROW EXCLUSIVE MODE`)
	return err
}

// CatchUp implements projections.Feed.
func (f *Feed) CatchUp(ctx context.Context, tx pgx.Tx, schema string) (int64, error) {
	offsets := func(table string) (map[int32]int64, error) {
		rows, err := tx.Query(ctx, `SELECT kafka_partition, last_offset FROM `+table+` WHERE consumer = $1 AND topic = $2`, f.u.cfg.Name, f.u.topic)
		if err != nil {
			return nil, err
		}
		out := map[int32]int64{}
		var p int32
		var o int64
		_, err = pgx.ForEachRow(rows, []any{&p, &o}, func() error { out[p] = o + 1; return nil })
		return out, err
	}
	shadow, err := offsets(pgx.Identifier{schema, "consumer_offsets"}.Sanitize())
	if err != nil {
		return 0, fmt.Errorf("shadow offsets: %w", err)
	}
	live, err := offsets("public.consumer_offsets")
	if err != nil {
		return 0, fmt.Errorf("live offsets: %w", err)
	}
	var n int64
	behind := false
	for p, o := range live {
		behind = behind || o > shadow[p]
	}
	if behind {
		c, err := f.client()
		if err != nil {
			return 0, err
		}
		defer c.Close()
		_, err = replay.ReadPartitions(ctx, c, f.u.topic, shadow, live, f.u.cfg.BatchRecords, func(ctx context.Context, p int32, msgs []*sarama.ConsumerMessage) error {
			n += int64(len(msgs))
			return f.apply(ctx, tx, p, msgs)
		})
		if err != nil {
			return n, err
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM public.consumer_offsets WHERE consumer = $1 AND topic = $2`, f.u.cfg.Name, f.u.topic); err != nil {
		return n, fmt.Errorf("replace offsets: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO public.consumer_offsets SELECT * FROM `+pgx.Identifier{schema, "consumer_offsets"}.Sanitize()+` WHERE consumer = $1 AND topic = $2`,
		f.u.cfg.Name, f.u.topic); err != nil {
		return n, fmt.Errorf("replace offsets: %w", err)
	}
	return n, nil
}
