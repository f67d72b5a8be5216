// Package apikeyusage folds the request-log topic into the usage columns of
// the API-key read model (request_count, last_used_at). It is a consumer
// group of its own beside the ClickHouse sink: each partition's records
// are gathered into a batch, aggregated per key, and applied with one
// UPDATE per batch. The last applied Kafka offset of each partition is
// stored in the same Postgres transaction as the counts, so a record
// redelivered after a crash, a rebalance or a replay is skipped instead of
// counted twice; the Kafka offset commit afterwards only saves rereading.
package apikeyusage

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/api/module"
	"github.com/cfgd/cfgd/events/bus"
)

// Config configures the usage consumer.
type Config struct {
	Bus bus.Config
	// Group is the Kafka consumer group. Renaming it rereads the topic,
	// harmlessly: the offsets stored under Name skip what was applied.
	Group string
	// Name keys the applied offsets in consumer_offsets.
	Name string
	// BatchRecords and BatchWait bound a partition's batch: it is applied
	// when it holds BatchRecords Kafka records (each packs many events) or
	// BatchWait after its first record, whichever comes first.
	BatchRecords int
	BatchWait    time.Duration
	// MaxBackoff caps the wait between attempts while Postgres is down.
	MaxBackoff time.Duration
}

// DefaultConfig returns the defaults for bus c.
func DefaultConfig(c bus.Config) Config {
	return Config{Bus: c, Group: "cfgd.requestlog-apikey-usage", Name: "apikey-usage",
		BatchRecords: 500, BatchWait: time.Second, MaxBackoff: 5 * time.Second}
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if err := c.Bus.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Group == "" {
		errs = append(errs, errors.New("apikey usage: Group is required"))
	}
	if c.Name == "" {
		errs = append(errs, errors.New("apikey usage: Name is required"))
	}
	if c.BatchRecords < 1 || c.BatchRecords > 100_000 {
		errs = append(errs, errors.New("apikey usage: BatchRecords must be 1..100000"))
	}
	if c.BatchWait <= 0 {
		errs = append(errs, errors.New("apikey usage: BatchWait must be positive"))
	}
	if c.MaxBackoff <= 0 {
		errs = append(errs, errors.New("apikey usage: MaxBackoff must be positive"))
	}
	return errors.Join(errs...)
}

// DB is what the consumer needs of Postgres (a *pgxpool.Pool).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Usage is the consumer.
type Usage struct {
	cfg   Config
	db    DB
	log   *slog.Logger
	topic string

	// health is why the consumer is not keeping up; nil when it is.
	health module.Health

	applied  atomic.Int64
	skipped  atomic.Int64
	ignored  atomic.Int64
	poisoned atomic.Int64

	// afterApply, when set (by tests), runs between a batch's Postgres
	// commit and its Kafka offset commit; an error stops the consumer
	// there, as a crash would.
	afterApply func() error
}

var errStarting = errors.New("api-key usage consumer is starting")

// New returns a consumer applying usage to db's api_keys table.
func New(cfg Config, db DB, log *slog.Logger) (*Usage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u := &Usage{cfg: cfg, db: db, log: log, topic: cfg.Bus.Topic(bus.TopicRequestLogs)}
	u.health.Set(errStarting)
	return u, nil
}

// Runner is the consumer as a module runner.
func (u *Usage) Runner() module.Runner { return module.Runner{Name: "apikey-usage", Run: u.Run} }

// Ready reports whether the consumer is keeping up.
func (u *Usage) Ready(ctx context.Context) error { return u.health.Ready(ctx) }

// Stats are the consumer's counters since it started.
type Stats struct {
	// Applied events were counted; Skipped events sat at or below the
	// stored offset (a redelivery); Ignored events carried no API key;
	// Poisoned records could not be read (the ClickHouse sink dead-letters
	// them).
	Applied, Skipped, Ignored, Poisoned int64
}

// Stats returns the counters.
func (u *Usage) Stats() Stats {
	return Stats{Applied: u.applied.Load(), Skipped: u.skipped.Load(), Ignored: u.ignored.Load(), Poisoned: u.poisoned.Load()}
}

// Run consumes until ctx ends: each partition's records in batches, the
// last applied offset stored with the counts. Kafka or Postgres being
// down is waited for (and reported by Ready), never a reason to return.
func (u *Usage) Run(ctx context.Context) error {
	return bus.Consume(ctx, u.cfg.Bus, u.cfg.Group, []string{bus.TopicRequestLogs}, u.handle,
		bus.WithBatch(u.cfg.BatchRecords, u.cfg.BatchWait), bus.WithRetry(100*time.Millisecond, u.cfg.MaxBackoff),
		bus.WithHealth(&u.health), bus.WithDrain(10*time.Second), bus.WithCommitEach(), bus.WithLog(u.log))
}
