// Package signing is the bus's cut-over to signed records. cfgd began
// signing its request-log, API-key usage and task lifecycle records in one
// release, so those topics may still hold unsigned records an older cfgd
// wrote. They are accepted only below a watermark per partition: the
// partition's end offset when a build that signs first started on the
// topic, recorded once in Postgres (signing_watermarks, first writer
// wins). Above it, on a partition added later (no watermark) and on a
// topic deleted and created again (another Kafka topic id), a record must
// carry a valid signature, so a broker login alone can forge nothing.
// Domain events were signed by the relay from the start: their consumers
// need no watermark.
package signing

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
)

//go:embed schema/*.sql
var schemaFS embed.FS

// PostgresSchema are the migrations of the table this package owns
// (signing_watermarks), for deploy/migrate.
func PostgresSchema() (fs.FS, error) { return fs.Sub(schemaFS, "schema") }

// DB is what a Cutover needs of Postgres (a *pgxpool.Pool).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Cutover is the signing cut-over of one topic. A nil *Cutover accepts no
// unsigned record at all.
type Cutover struct {
	db    DB
	bus   kafka.Config
	name  string // before Config.TopicPrefix
	topic string
	log   *slog.Logger

	mu      sync.Mutex
	started bool
	session uint64

	// below is, per partition, the offset below which a record may be
	// unsigned (nil: none may).
	below    atomic.Pointer[map[int32]int64]
	unsigned atomic.Int64
}

// New returns the cut-over of topic (a name before c.TopicPrefix), whose
// watermark db keeps.
func New(db DB, c kafka.Config, topic string, log *slog.Logger) *Cutover {
	return &Cutover{db: db, bus: c, name: topic, topic: c.Topic(topic), log: log}
}

// Start records the topic's watermark if none is recorded yet, then loads
// the one that applies to the topic as it is now: none when the topic was
// created again since (its id differs from the recorded one). The topic
// must exist. Consumers call it once before they read (kafka.WithSetup),
// so the watermark is the topic's end when the first signing build
// started, and again at every session (Session), which notices a topic
// created again.
func (c *Cutover) Start(ctx context.Context) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start(ctx)
}

// Session is Start once per consumer-group session n (kafka.Batch.Session).
func (c *Cutover) Session(ctx context.Context, n uint64) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started && c.session == n {
		return nil
	}
	if err := c.start(ctx); err != nil {
		return err
	}
	c.session = n
	return nil
}

func (c *Cutover) start(ctx context.Context) error {
	id, err := kafka.TopicID(ctx, c.bus, c.name)
	if errors.Is(err, kafka.ErrNoTopicID) {
		id, err = "", nil // brokers before 2.8: a topic created again goes unnoticed
	}
	if err != nil {
		return fmt.Errorf("signing cut-over of %s: %w", c.topic, err)
	}
	marks, err := c.load(ctx)
	if err != nil {
		return err
	}
	if len(marks) == 0 {
		if err := c.record(ctx, id); err != nil {
			return err
		}
		if marks, err = c.load(ctx); err != nil {
			return err
		}
	}
	below := map[int32]int64{}
	for _, m := range marks {
		if m.topicID == id {
			below[m.partition] = m.end
		}
	}
	if len(below) == 0 && len(marks) > 0 && (!c.started || len(c.Below()) > 0) {
		c.log.WarnContext(ctx, "topic created again since the signing cut-over: every record must be signed",
			"topic", c.topic, "topic_id", id)
	}
	c.below.Store(&below)
	c.started = true
	return nil
}

type mark struct {
	partition int32
	topicID   string
	end       int64
}

func (c *Cutover) load(ctx context.Context) ([]mark, error) {
	var out []mark
	err := pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT partition, topic_id, end_offset FROM signing_watermarks WHERE topic = $1`, c.topic)
		if err != nil {
			return err
		}
		var m mark
		_, err = pgx.ForEachRow(rows, []any{&m.partition, &m.topicID, &m.end}, func() error {
			out = append(out, m)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("signing watermark of %s: %w", c.topic, err)
	}
	return out, nil
}

// record writes the watermark of every partition the topic has now,
// unless one is recorded for the topic already: the table lock orders two
// first starts, and the first one's watermark stands. A partition added
// later never gets one.
func (c *Cutover) record(ctx context.Context, id string) error {
	r, err := kafka.NewReader(c.bus)
	if err != nil {
		return err
	}
	ends, err := r.Ends(c.topic)
	_ = r.Close()
	if err != nil {
		return fmt.Errorf("signing watermark of %s: %w", c.topic, err)
	}
	parts, offs := make([]int32, 0, len(ends)), make([]int64, 0, len(ends))
	for p, e := range ends {
		parts, offs = append(parts, p), append(offs, e)
	}
	var n int64
	err = pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE signing_watermarks IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO signing_watermarks (topic, partition, topic_id, end_offset)
			SELECT $1, p, $2, e FROM unnest($3::integer[], $4::bigint[]) AS x (p, e)
			WHERE NOT EXISTS (SELECT 1 FROM signing_watermarks WHERE topic = $1)
			ON CONFLICT DO NOTHING`, c.topic, id, parts, offs)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("record the signing watermark of %s: %w", c.topic, err)
	}
	if n > 0 {
		c.log.InfoContext(ctx, "signing cut-over recorded: older unsigned records are accepted below these offsets, every later one must be signed",
			"topic", c.topic, "topic_id", id, "ends", ends)
	}
	return nil
}

// Below is, per partition, the offset below which a record may be
// unsigned (empty before Start, or when none may).
func (c *Cutover) Below() map[int32]int64 {
	if c == nil {
		return nil
	}
	if p := c.below.Load(); p != nil {
		return *p
	}
	return nil
}

// Unsigned counts the records Verify accepted unsigned.
func (c *Cutover) Unsigned() int64 {
	if c == nil {
		return 0
	}
	return c.unsigned.Load()
}

// Verify checks m's signature with s. A record with no signature at all
// passes when it lies below its partition's watermark: an older cfgd wrote
// it. A wrong signature never passes, whatever the offset.
func (c *Cutover) Verify(s *events.Signer, m *sarama.ConsumerMessage) error {
	sig := header(m, events.HeaderSignature)
	err := s.Verify(m.Value, sig)
	if err == nil || sig != "" || c == nil {
		return err
	}
	if end, ok := c.Below()[m.Partition]; ok && m.Offset < end {
		c.unsigned.Add(1)
		return nil
	}
	return err
}

// header is the value of m's header key ("" when it has none).
func header(m *sarama.ConsumerMessage, key string) string {
	for _, h := range m.Headers {
		if h != nil && string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}
