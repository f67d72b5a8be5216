package sinks

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/signing"
)

// UsageConfig configures the usage consumer.
type UsageConfig struct {
	Bus kafka.Config
	// Group is the Kafka consumer group. Renaming it rereads the topic,
	// harmlessly: the offsets stored under Name skip what was applied.
	Group string
	// Name keys the applied offsets in consumer_offsets.
	Name string
	// BatchRecords and BatchWait bound a partition's batch: it is applied
	// when it holds BatchRecords Kafka records (each packs many keys) or
	// BatchWait after its first record, whichever comes first.
	BatchRecords int
	BatchWait    time.Duration
	// MaxBackoff caps the wait between attempts while Postgres is down.
	MaxBackoff time.Duration
	// Signer verifies each usage record's signature (nil: no check), so
	// a record forged with a broker login alone counts no API-key use.
	Signer *events.Signer
	// Cutover accepts the unsigned records an older cfgd wrote, below
	// the topic's signing watermark (nil: every record must be signed).
	Cutover *signing.Cutover
}

// DefaultUsageConfig returns the defaults for bus c.
func DefaultUsageConfig(c kafka.Config) UsageConfig {
	return UsageConfig{Bus: c, Group: "cfgd.apikey-usage", Name: "apikey-usage",
		BatchRecords: 500, BatchWait: time.Second, MaxBackoff: 5 * time.Second}
}

// Validate joins every problem of c.
func (c UsageConfig) Validate() error {
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

// Usage folds the usage topic into the usage columns of the API-key read
// model (request_count, last_used_at). The topic holds only what cfgd
// itself observed: the requests its authenticator accepted a key for, at
// server time (events/apikey.UsageRecorder). The request log is never
// counted: its api_key_id and created_at are what a caller reported, and
// any key holder can report anything. Each partition's records are
// gathered into a batch, aggregated per key, and applied with one UPDATE
// per batch. The last applied Kafka offset of each partition is
// stored in the same Postgres transaction as the counts, so a record
// redelivered after a crash, a rebalance or a replay is skipped instead of
// counted twice; the Kafka offset commit afterwards only saves rereading.
type Usage struct {
	cfg   UsageConfig
	db    DB
	log   *slog.Logger
	topic string

	// health is why the consumer is not keeping up; nil when it is.
	health process.Health

	applied  atomic.Int64
	skipped  atomic.Int64
	poisoned atomic.Int64

	// afterApply, when set (by tests), runs between a batch's Postgres
	// commit and its Kafka offset commit; an error stops the consumer
	// there, as a crash would.
	afterApply func() error

	metrics *Metrics

	// The usage topic's id, read once per consumer-group session.
	idMu      sync.Mutex
	idRead    bool
	idSession uint64
	idValue   string
	// recreated counts the times the topic was found created again;
	// notice says so through Ready until a later batch is applied.
	recreated atomic.Int64
	notice    atomic.Pointer[error]
}

var errUsageStarting = errors.New("api-key usage consumer is starting")

// New returns a consumer applying usage to db's api_keys table.
func NewUsage(cfg UsageConfig, db DB, log *slog.Logger) (*Usage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u := &Usage{cfg: cfg, db: db, log: log, topic: cfg.Bus.Topic(kafka.TopicAPIKeyUsage)}
	u.health.Set(process.NotReady(process.Starting, errUsageStarting))
	return u, nil
}

// Runner is the consumer as a module runner.
func (u *Usage) Runner() process.Runner { return process.Runner{Name: "apikey-usage", Run: u.Run} }

// Ready reports whether the consumer is keeping up.
func (u *Usage) Ready(ctx context.Context) error {
	if n := u.notice.Load(); n != nil {
		return *n
	}
	return u.health.Ready(ctx)
}

// UsageStats are the consumer's counters since it started.
type UsageStats struct {
	// Applied requests were counted; Skipped requests sat at or below
	// the stored offset (a redelivery); Poisoned records could not be read.
	Applied, Skipped, Poisoned int64
	// TopicRecreated counts the times the usage topic was found deleted
	// and created again (a new topic id).
	TopicRecreated int64
}

// Stats returns the counters.
func (u *Usage) Stats() UsageStats {
	return UsageStats{Applied: u.applied.Load(), Skipped: u.skipped.Load(), Poisoned: u.poisoned.Load(), TopicRecreated: u.recreated.Load()}
}

// Run consumes until ctx ends: each partition's records in batches, the
// last applied offset stored with the counts. Kafka or Postgres being
// down is waited for (and reported by Ready), never a reason to return.
func (u *Usage) Run(ctx context.Context) error {
	return kafka.Consume(ctx, u.cfg.Bus, u.cfg.Group, []string{kafka.TopicAPIKeyUsage}, u.handle,
		kafka.WithBatch(u.cfg.BatchRecords, u.cfg.BatchWait), kafka.WithRetry(100*time.Millisecond, u.cfg.MaxBackoff),
		kafka.WithHealth(&u.health), kafka.WithDrain(10*time.Second), kafka.WithCommitEach(), kafka.WithLog(u.log), kafka.WithMetrics(u.metrics.registerer()),
		kafka.WithSetup(u.cfg.Cutover.Start))
}
