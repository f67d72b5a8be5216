// Package requestlog is the ClickHouse sink of the request log: a sarama
// consumer group on the request-log topic that inserts large batches into
// the raw table (whose materialized views keep the rollups), then commits
// the offsets. Each row carries its Kafka partition and offset; before a
// batch goes in, rows ClickHouse already holds are skipped, so a
// redelivered batch (a crash between insert and commit, a rebalance, a
// replay from the start) never counts twice. Records it cannot read go to
// a dead-letter topic instead of stalling their partition.
package sinks

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/signing"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// RequestLogConfig configures the sink.
type RequestLogConfig struct {
	Bus kafka.Config
	// Signer verifies each record's signature (requestlog.ProducerConfig
	// signs with the same key): a record forged, or unsigned and not below
	// the signing watermark (Cutover), goes to the dead letters. Nil skips the check (tests of other features only).
	Signer *events.Signer
	// Cutover accepts the unsigned records an older cfgd wrote, below
	// the topic's signing watermark (nil: every record must be signed).
	Cutover *signing.Cutover
	// Group is the consumer group; renaming it replays the whole topic
	// (harmlessly: rows already held are skipped).
	Group string
	// BatchRows and BatchWait bound a batch: it is inserted when it holds
	// BatchRows events or BatchWait after its first record, whichever
	// comes first; and sooner, once the sink has read every partition it
	// holds to its end, but no sooner than BatchGap after the previous
	// insert began. So at most 1/BatchGap inserts per second, hence new
	// parts per table (raw and each rollup), per sink: a quiet stream is
	// queryable within about BatchGap without turning into a part per
	// record.
	BatchRows int
	BatchWait time.Duration
	BatchGap  time.Duration
	// RetentionDays of request logs; older day partitions are dropped every
	// RetentionEvery.
	RetentionDays  int
	RetentionEvery time.Duration
	// MaxBackoff caps the wait between attempts while ClickHouse is down.
	MaxBackoff time.Duration
	// Cluster is the ClickHouse cluster the tables span
	// (CLICKHOUSE__CLUSTER; empty: one server). The sink then writes
	// through the Distributed tables synchronously, so a batch's rows and
	// the rollups their views feed are on the shard of their Kafka
	// partition before the offsets are committed, and drops expired
	// partitions on every shard.
	Cluster string
	// Dial reaches one server of the cluster (host:port from
	// system.clusters) with the sink's credentials and database: retention
	// drops expired partitions shard by shard. Required with Cluster.
	Dial requestlogview.Dialer
}

// DefaultRequestLogConfig returns the defaults for bus c.
func DefaultRequestLogConfig(c kafka.Config) RequestLogConfig {
	return RequestLogConfig{Bus: c, Group: "cfgd.requestlog-clickhouse", BatchRows: 50_000, BatchWait: 500 * time.Millisecond, BatchGap: 100 * time.Millisecond,
		RetentionDays: 30, RetentionEvery: time.Hour, MaxBackoff: 5 * time.Second}
}

// Validate joins every problem of c.
func (c RequestLogConfig) Validate() error {
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
	if c.BatchGap <= 0 {
		// A gap at or above BatchWait leaves the batches to BatchWait.
		errs = append(errs, errors.New("requestlog sink: BatchGap must be positive"))
	}
	if c.RetentionDays < 1 {
		errs = append(errs, errors.New("requestlog sink: RetentionDays must be at least 1"))
	}
	if c.RetentionEvery <= 0 || c.MaxBackoff <= 0 {
		errs = append(errs, errors.New("requestlog sink: RetentionEvery and MaxBackoff must be positive"))
	}
	if err := requestlogview.ValidClusterName(c.Cluster); err != nil {
		errs = append(errs, fmt.Errorf("requestlog sink: %w", err))
	}
	return errors.Join(errs...)
}

// RequestLogs moves request logs from Kafka into ClickHouse.
type RequestLogs struct {
	cfg   RequestLogConfig
	conn  driver.Conn
	fence RequestLogFence
	log   *slog.Logger
	now   func() time.Time
	topic string
	// writer names this sink in the fence's record of who wrote each
	// partition last.
	writer string

	// health is the reason the sink is not keeping up (ClickHouse or
	// Kafka down, schema not created yet); nil when it is.
	health process.Health

	// held is, per partition, the highest offset each table holds (raw,
	// minute, hour, day: LiveTables().All()); loaded
	// once per consumer-group session (another member may have written
	// meanwhile) and again after a replay swapped the tables (heldGen is
	// the fence's generation it was loaded under). Only the loop's one
	// batcher (kafka.WithSpan) touches them.
	held        map[int32][4]int64
	heldGen     int64
	heldSession uint64
	// failed are, per partition, the offset ranges of inserts that failed
	// (any error: the raw rows and some rollups' may have landed): the
	// rollups are checked for exactly those ranges once the raw table
	// holds them (verifyFailed). Only the batcher touches it.
	failed map[int32][]offsetRange
	// insert, when set (by tests), replaces the insert of a batch's rows.
	insert func(ctx context.Context, rows *RequestLogRows) error

	inserted atomic.Int64
	skipped  atomic.Int64
	poisoned atomic.Int64
	refilled atomic.Int64
	// recreated counts the times the topic was found deleted and created
	// again; topicNotice says so through Ready until the first batch of
	// the new topic is in.
	recreated   atomic.Int64
	topicNotice atomic.Pointer[topicNotice]

	// afterInsert, when set (by tests), runs between a batch's insert and
	// its offset commit; an error stops the sink there, as a crash would.
	afterInsert func() error

	metrics *Metrics
}

var (
	errRequestLogsStarting = errors.New("request-log sink is starting")
	errRequestLogSchema    = errors.New("request-log tables incomplete")
	errTopicRecreated      = errors.New("request-log topic recreated")
)

type topicNotice struct{ err error }

// New returns a sink writing to conn's database that no replay
// coordinates with: for a database `cfgd replay` never rebuilds (tests and
// benchmarks). cfgd serve uses NewFencedRequestLogs.
func NewRequestLogs(cfg RequestLogConfig, conn driver.Conn, log *slog.Logger) (*RequestLogs, error) {
	return NewFencedRequestLogs(cfg, conn, nil, log)
}

// NewFencedRequestLogs returns a sink writing to conn's database, each batch (insert
// and offset commit) inside fence, so a replay can swap the tables between
// two batches and the sink notices it (nil: no fence).
func NewFencedRequestLogs(cfg RequestLogConfig, conn driver.Conn, fence RequestLogFence, log *slog.Logger) (*RequestLogs, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Cluster != "" && cfg.Dial == nil {
		return nil, errors.New("requestlog sink: a cluster needs Dial to reach each shard")
	}
	s := &RequestLogs{cfg: cfg, conn: conn, fence: fence, log: log, now: time.Now, held: map[int32][4]int64{},
		failed: map[int32][]offsetRange{}, topic: cfg.Bus.Topic(kafka.TopicRequestLogs), writer: rand.Text()}
	s.health.Set(process.NotReady(process.Starting, errRequestLogsStarting))
	return s, nil
}

// Runner is the sink as a module runner.
func (s *RequestLogs) Runner() process.Runner {
	return process.Runner{Name: "requestlog-sink", Run: s.Run}
}

// Ready reports whether the sink is keeping up: an error while ClickHouse
// is down (consumption is paused then) or before the sink has started.
func (s *RequestLogs) Ready(ctx context.Context) error {
	if n := s.topicNotice.Load(); n != nil {
		return n.err
	}
	return s.health.Ready(ctx)
}

// RequestLogStats are the sink's counters since it started.
type RequestLogStats struct{ Inserted, Skipped, Poisoned, Refilled, TopicRecreated int64 }

// Stats returns the counters: events inserted, events skipped because
// ClickHouse already held them, records sent to the dead-letter topic,
// rollups refilled from the raw table after a partial insert, times the
// topic was found deleted and created again.
func (s *RequestLogs) Stats() RequestLogStats {
	return RequestLogStats{Inserted: s.inserted.Load(), Skipped: s.skipped.Load(), Poisoned: s.poisoned.Load(),
		Refilled: s.refilled.Load(), TopicRecreated: s.recreated.Load()}
}

// Run consumes until ctx ends. Dependencies that are down are waited for
// (and reported by Ready), never a reason to return.
func (s *RequestLogs) Run(ctx context.Context) error {
	ctx = s.clusterContext(ctx)
	// The tables are the migrations' (cfgd serve and cfgd migrate run
	// them): the sink waits for them rather than create a schema of its
	// own beside goose's.
	if err := s.retry(ctx, "clickhouse schema", func(ctx context.Context) error {
		// Fenced: never in the middle of a replay's swap.
		return s.fenced(ctx, func(int64) error {
			if err := s.checkLoadBalancing(ctx); err != nil {
				return err
			}
			return s.checkSchema(ctx)
		})
	}); err != nil {
		return nil
	}
	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.retention(bg) }()
	defer func() {
		stopBG()
		wg.Wait()
	}()
	return kafka.Consume(ctx, s.cfg.Bus, s.cfg.Group, []string{kafka.TopicRequestLogs}, s.handle,
		kafka.WithSpan(), kafka.WithBatch(s.cfg.BatchRows, s.cfg.BatchWait), kafka.WithCatchUp(s.cfg.BatchGap), kafka.WithWeight(recordEvents),
		kafka.WithRetry(100*time.Millisecond, s.cfg.MaxBackoff), kafka.WithDeadLetter(kafka.TopicRequestLogsDead),
		kafka.WithHealth(&s.health), kafka.WithDrain(10*time.Second), kafka.WithCommitEach(), kafka.WithLog(s.log), kafka.WithMetrics(s.metrics.registerer()),
		kafka.WithSetup(s.cfg.Cutover.Start))
}

// checkSchema tells whether the live tables and views are all there, and
// what the operator should run if not.
func (s *RequestLogs) checkSchema(ctx context.Context) error {
	live := requestlogview.LiveTables()
	want := append(live.All(), live.Views()...)
	// The names are the package's constants, never input.
	rs, err := s.conn.Query(ctx, "SELECT name FROM system.tables WHERE database = currentDatabase() AND name IN ('"+strings.Join(want, "', '")+"')")
	if err != nil {
		return fmt.Errorf("request-log tables: %w", err)
	}
	defer rs.Close()
	have := map[string]bool{}
	for rs.Next() {
		var name string
		if err := rs.Scan(&name); err != nil {
			return fmt.Errorf("request-log tables: %w", err)
		}
		have[name] = true
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("request-log tables: %w", err)
	}
	var tables, views []string
	for _, t := range live.All() {
		if !have[t] {
			tables = append(tables, t)
		}
	}
	for _, v := range live.Views() {
		if !have[v] {
			views = append(views, v)
		}
	}
	switch {
	case len(tables) > 0:
		return process.NotReady(process.TablesMissing, fmt.Errorf("%w: %s missing: run `cfgd migrate`", errRequestLogSchema, strings.Join(tables, ", ")))
	case len(views) > 0:
		return process.NotReady(process.ViewsMissing, fmt.Errorf("%w: views %s missing (a replay died inside its swap?): run `cfgd replay %s` again",
			errRequestLogSchema, strings.Join(views, ", "), replay.RequestLogName))
	}
	return nil
}

// retry runs fn until it succeeds or ctx ends, reporting the failure
// through Ready meanwhile.
func (s *RequestLogs) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	return s.health.Retry(ctx, s.log, what, s.cfg.MaxBackoff, fn)
}

// owned runs fn inside the fence, if any, holding parts for this sink.
func (s *RequestLogs) owned(ctx context.Context, parts []int32, fn func(gen int64, stale []int32, base map[int32]int64) error) error {
	if s.fence == nil {
		return fn(0, nil, nil)
	}
	return s.fence.Own(ctx, s.topic, parts, s.writer, fn)
}

// fenced runs fn inside the fence, if any.
func (s *RequestLogs) fenced(ctx context.Context, fn func(gen int64) error) error {
	if s.fence == nil {
		return fn(0)
	}
	return s.fence.Shared(ctx, fn)
}

func (s *RequestLogs) retention(ctx context.Context) {
	for {
		var n int
		err := s.fenced(ctx, func(int64) error {
			var err error
			if s.cfg.Cluster == "" {
				n, err = requestlogview.DropExpired(ctx, s.conn, requestlogview.LiveTables(), s.cfg.RetentionDays, s.now())
				return err
			}
			var db string
			if err := s.conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&db); err != nil {
				return fmt.Errorf("request-log database: %w", err)
			}
			n, err = requestlogview.DropExpiredOn(ctx, s.conn, requestlogview.LiveTables(), requestlogview.Cluster{Name: s.cfg.Cluster, Database: db}, s.cfg.Dial, s.cfg.RetentionDays, s.now())
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

// clusterContext carries the settings of every query the sink sends to a
// cluster. insert_distributed_sync: an insert into a Distributed table
// returns once every shard's replica took its rows (and the views fed that
// shard's rollups), so the offsets are committed only after that, and a
// retried batch is sent to the same shards (sharded by partition) where the
// replicated tables deduplicate an identical block.
func (s *RequestLogs) clusterContext(ctx context.Context) context.Context {
	if s.cfg.Cluster == "" {
		return ctx
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
}

// heldReads are the contexts the offset check reads each table with; it
// takes the highest offset any of them finds. One server: ctx. A cluster:
// a shard's first replica that fails and returns answers reads before it
// has fetched what the other replica took meanwhile, so its offsets are
// too low, and the sink would insert those rows again. So the check reads
// twice: as the inserts go (load_balancing in_order: the first replica
// up, caught up or not, which holds every batch inserted since it was
// back), and through replicas less than a second behind only
// (max_replica_delay_for_distributed_queries=1 and no fallback to stale
// ones: a replica just restarted reports a delay as old as the first
// insert it has not fetched, or without end until it has loaded its
// replication queue), which hold what was inserted before. No such replica in a shard: the read fails
// and the batch waits, rather than trust one that is behind.
func (s *RequestLogs) heldReads(ctx context.Context) []context.Context {
	if s.cfg.Cluster == "" {
		return []context.Context{ctx}
	}
	return []context.Context{
		clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_replica_delay_for_distributed_queries": 0})),
		clickhouse.Context(ctx, clickhouse.WithSettings(requestlogview.CaughtUpReads())),
	}
}

// checkLoadBalancing: on a cluster, inserts and the offset checks must go
// to the same replica of a shard, the first one up (load_balancing
// in_order), or the sink could read back a replica still catching up and
// insert again what the other one holds. 18.16 takes no string setting
// from this driver (only numbers before settings went as strings), so it
// is the user profile's to set: the sink refuses to write without it.
func (s *RequestLogs) checkLoadBalancing(ctx context.Context) error {
	if s.cfg.Cluster == "" {
		return nil
	}
	var v string
	if err := s.conn.QueryRow(ctx, "SELECT value FROM system.settings WHERE name = 'load_balancing'").Scan(&v); err != nil {
		return fmt.Errorf("load_balancing setting: %w", err)
	}
	if v != "in_order" {
		return process.NotReady(process.ClickHouseProfile, fmt.Errorf("%w: load_balancing is %q: set <load_balancing>in_order</load_balancing> in the profile of cfgd's ClickHouse user on every server (CLICKHOUSE__CLUSTER is set)", errRequestLogSchema, v))
	}
	return nil
}
