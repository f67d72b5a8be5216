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
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cfgd/cfgd/deploy/process"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events/kafka"
)

// Config configures the usage consumer.
type Config struct {
	Bus kafka.Config
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
func DefaultConfig(c kafka.Config) Config {
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
	health process.Health

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
	u := &Usage{cfg: cfg, db: db, log: log, topic: cfg.Bus.Topic(kafka.TopicRequestLogs)}
	u.health.Set(errStarting)
	return u, nil
}

// Runner is the consumer as a module runner.
func (u *Usage) Runner() process.Runner { return process.Runner{Name: "apikey-usage", Run: u.Run} }

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

// Run consumes until ctx ends. Kafka or Postgres being down is waited for
// (and reported by Ready), never a reason to return.
func (u *Usage) Run(ctx context.Context) error {
	if err := u.retry(ctx, "kafka topics", func(ctx context.Context) error {
		return kafka.EnsureTopics(ctx, u.cfg.Bus, u.log, kafka.TopicRequestLogs)
	}); err != nil {
		return nil
	}
	var group sarama.ConsumerGroup
	if err := u.retry(ctx, "kafka consumer group", func(context.Context) error {
		var err error
		group, err = sarama.NewConsumerGroup(u.cfg.Bus.Brokers, u.cfg.Group, u.cfg.Bus.BulkConsumerSarama())
		return err
	}); err != nil {
		return nil
	}
	defer group.Close()
	u.health.Set(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for err := range group.Errors() {
			u.log.WarnContext(ctx, "api-key usage consumer", "err", err)
		}
	}()
	defer wg.Wait()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		cctx, crash := context.WithCancel(ctx)
		h := &handler{u: u, crash: crash}
		err := group.Consume(cctx, []string{u.topic}, h)
		crash()
		if p := h.fatal.Load(); p != nil {
			_ = group.Close()
			return *p
		}
		if err != nil && ctx.Err() == nil {
			u.health.Set(fmt.Errorf("kafka: %w", err))
			u.log.WarnContext(ctx, "api-key usage consume", "err", err)
			process.Sleep(ctx, backoff)
			backoff = min(backoff*2, u.cfg.MaxBackoff)
			continue
		}
		backoff = 100 * time.Millisecond
	}
	_ = group.Close()
	return nil
}

func (u *Usage) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	return u.health.Retry(ctx, u.log, what, u.cfg.MaxBackoff, fn)
}
