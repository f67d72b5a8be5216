// Package requestlog is the ClickHouse sink of the request log: a sarama
// consumer group on the request-log topic that inserts large batches into
// the raw table (whose materialized views keep the rollups), then commits
// the offsets. Each row carries its Kafka partition and offset; before a
// batch goes in, rows ClickHouse already holds are skipped, so a
// redelivered batch (a crash between insert and commit, a rebalance, a
// replay from the start) never counts twice. Records it cannot read go to
// a dead-letter topic instead of stalling their partition.
package requestlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cfgd/cfgd/deploy/process"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/deploy/migrations"
	"github.com/cfgd/cfgd/events/kafka"
)

// Config configures the sink.
type Config struct {
	Bus kafka.Config
	// Group is the consumer group; renaming it replays the whole topic
	// (harmlessly: rows already held are skipped).
	Group string
	// BatchRows and BatchWait bound a batch: it is inserted when it holds
	// BatchRows events or BatchWait after its first record, whichever
	// comes first.
	BatchRows int
	BatchWait time.Duration
	// RetentionDays of request logs; older day partitions are dropped every
	// RetentionEvery.
	RetentionDays  int
	RetentionEvery time.Duration
	// MaxBackoff caps the wait between attempts while ClickHouse is down.
	MaxBackoff time.Duration
}

// DefaultConfig returns the defaults for bus c.
func DefaultConfig(c kafka.Config) Config {
	return Config{Bus: c, Group: "cfgd.requestlog-clickhouse", BatchRows: 50_000, BatchWait: 500 * time.Millisecond,
		RetentionDays: 30, RetentionEvery: time.Hour, MaxBackoff: 5 * time.Second}
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if err := c.Bus.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Group == "" {
		errs = append(errs, errors.New("requestlog sink: Group is required"))
	}
	if c.BatchRows < 1 || c.BatchRows > 1_000_000 {
		// One insert stays one ClickHouse block (max_insert_block_size).
		errs = append(errs, errors.New("requestlog sink: BatchRows must be 1..1000000"))
	}
	if c.BatchWait <= 0 {
		errs = append(errs, errors.New("requestlog sink: BatchWait must be positive"))
	}
	if c.RetentionDays < 1 {
		errs = append(errs, errors.New("requestlog sink: RetentionDays must be at least 1"))
	}
	if c.RetentionEvery <= 0 || c.MaxBackoff <= 0 {
		errs = append(errs, errors.New("requestlog sink: RetentionEvery and MaxBackoff must be positive"))
	}
	return errors.Join(errs...)
}

// Sink moves request logs from Kafka into ClickHouse.
type Sink struct {
	cfg   Config
	conn  driver.Conn
	fence Fence
	log   *slog.Logger
	now   func() time.Time
	topic string
	dead  string

	// health is the reason the sink is not keeping up (ClickHouse or
	// Kafka down, schema not created yet); nil when it is.
	health process.Health

	dlqMu sync.Mutex
	dlq   sarama.SyncProducer

	inserted atomic.Int64
	skipped  atomic.Int64
	poisoned atomic.Int64

	// afterInsert, when set (by tests), runs between a batch's insert and
	// its offset commit; an error stops the sink there, as a crash would.
	afterInsert func() error
}

var errStarting = errors.New("request-log sink is starting")

// New returns a sink writing to conn's database that no replay
// coordinates with: for a database `cfgd replay` never rebuilds (tests and
// benchmarks). cfgd serve uses NewFenced.
func New(cfg Config, conn driver.Conn, log *slog.Logger) (*Sink, error) {
	return NewFenced(cfg, conn, nil, log)
}

// NewFenced returns a sink writing to conn's database, each batch (insert
// and offset commit) inside fence, so a replay can swap the tables between
// two batches and the sink notices it (nil: no fence).
func NewFenced(cfg Config, conn driver.Conn, fence Fence, log *slog.Logger) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, conn: conn, fence: fence, log: log, now: time.Now,
		topic: cfg.Bus.Topic(kafka.TopicRequestLogs), dead: cfg.Bus.Topic(kafka.TopicRequestLogsDead)}
	s.health.Set(errStarting)
	return s, nil
}

// Runner is the sink as a module runner.
func (s *Sink) Runner() process.Runner { return process.Runner{Name: "requestlog-sink", Run: s.Run} }

// Ready reports whether the sink is keeping up: an error while ClickHouse
// is down (consumption is paused then) or before the sink has started.
func (s *Sink) Ready(ctx context.Context) error { return s.health.Ready(ctx) }

// Stats are the sink's counters since it started.
type Stats struct{ Inserted, Skipped, Poisoned int64 }

// Stats returns the counters: events inserted, events skipped because
// ClickHouse already held them, records sent to the dead-letter topic.
func (s *Sink) Stats() Stats {
	return Stats{Inserted: s.inserted.Load(), Skipped: s.skipped.Load(), Poisoned: s.poisoned.Load()}
}

// Run consumes until ctx ends. Dependencies that are down are waited for
// (and reported by Ready), never a reason to return.
func (s *Sink) Run(ctx context.Context) error {
	defer s.closeDLQ()
	if err := s.retry(ctx, "clickhouse schema", func(ctx context.Context) error {
		// Fenced: never in the middle of a replay's swap.
		return s.fenced(ctx, func(int64) error { return migrations.UpRequestLog(ctx, s.conn, s.cfg.RetentionDays) })
	}); err != nil {
		return nil
	}
	if err := s.retry(ctx, "kafka topics", func(ctx context.Context) error {
		return kafka.EnsureTopics(ctx, s.cfg.Bus, s.log, kafka.TopicRequestLogs, kafka.TopicRequestLogsDead)
	}); err != nil {
		return nil
	}
	var group sarama.ConsumerGroup
	if err := s.retry(ctx, "kafka consumer group", func(context.Context) error {
		var err error
		group, err = sarama.NewConsumerGroup(s.cfg.Bus.Brokers, s.cfg.Group, s.cfg.Bus.BulkConsumerSarama())
		return err
	}); err != nil {
		return nil
	}
	defer group.Close()
	s.health.Set(nil)

	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.retention(bg) }()
	go func() {
		defer wg.Done()
		for err := range group.Errors() {
			s.log.WarnContext(ctx, "request-log consumer", "err", err)
		}
	}()
	backoff := 100 * time.Millisecond
	var failed error
	for ctx.Err() == nil {
		h := &handler{s: s}
		err := group.Consume(ctx, []string{s.topic}, h)
		if h.fatal != nil {
			failed = h.fatal
			break
		}
		if err != nil && ctx.Err() == nil {
			s.health.Set(fmt.Errorf("kafka: %w", err))
			s.log.WarnContext(ctx, "request-log consume", "err", err)
			process.Sleep(ctx, backoff)
			backoff = min(backoff*2, s.cfg.MaxBackoff)
			continue
		}
		backoff = 100 * time.Millisecond
	}
	stopBG()
	_ = group.Close()
	wg.Wait()
	return failed
}

// retry runs fn until it succeeds or ctx ends, reporting the failure
// through Ready meanwhile.
func (s *Sink) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	return s.health.Retry(ctx, s.log, what, s.cfg.MaxBackoff, fn)
}

// fenced runs fn inside the fence, if any.
func (s *Sink) fenced(ctx context.Context, fn func(gen int64) error) error {
	if s.fence == nil {
		return fn(0)
	}
	return s.fence.Shared(ctx, fn)
}

func (s *Sink) retention(ctx context.Context) {
	for {
		var n int
		err := s.fenced(ctx, func(int64) error {
			var err error
			n, err = migrations.DropExpiredRequestLogs(ctx, s.conn, s.cfg.RetentionDays, s.now())
			return err
		})
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.WarnContext(ctx, "request-log retention", "err", err)
		case n > 0:
			s.log.InfoContext(ctx, "request-log partitions dropped", "partitions", n, "retention_days", s.cfg.RetentionDays)
		}
		if !process.Sleep(ctx, s.cfg.RetentionEvery) {
			return
		}
	}
}
