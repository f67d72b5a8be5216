package requestlog

// Replay rebuilds the ClickHouse request-log tables from the request-log
// topic. The tables are rebuilt beside the live ones under a suffix
// (requestlog_raw__replay and its rollups) with the sink's own rows and
// ids, read with plain partition consumers from the oldest offset of every
// partition. The bulk of the topic goes into the raw table alone; the
// rollups are then filled in one pass each and get their own materialized
// views for the rest. Once nearly caught up, the replay takes the fence exclusively (the sink finishes its batch
// and waits), reads the rest, and swaps: one RENAME moves the live tables
// to __old and the shadow ones to the live names, the views are re-created
// so the live raw table feeds the live rollups, the generation is bumped,
// the fence is released, and the __old tables are dropped. Queries read
// the old tables until that RENAME.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/deploy/migrations"
	"github.com/cfgd/cfgd/events/kafka"
)

// ReplayName is the projection's name for `cfgd replay`.
const ReplayName = "requestlog.clickhouse"

// Suffixes of a replay's tables: the shadow tables it builds, and the live
// tables between the swap and their drop.
const (
	ShadowSuffix = "__replay"
	OldSuffix    = "__old"
)

// ErrBusy refuses a second replay while one is running.
var ErrBusy = errors.New("another replay of it is running; wait for that one to finish or stop it")

// ReplayConfig tunes a replay.
type ReplayConfig struct {
	Bus kafka.Config
	// BatchRows bounds one insert into the shadow raw table (one
	// ClickHouse block: at most 1,000,000).
	BatchRows int
	// Inserters is how many inserts run at once while the next batch is
	// decoded.
	Inserters int
	// RetentionDays is the sink's: days it would have dropped are dropped
	// from the shadow tables before the swap.
	RetentionDays int
	// CatchUpRecords: once the topic is at most this many records ahead,
	// the replay holds the sink back and reads the rest.
	CatchUpRecords int64
	// BuildOnly builds the shadow tables and drops them instead of
	// swapping (the benchmark).
	BuildOnly bool
}

// DefaultReplayConfig returns the defaults for bus c.
func DefaultReplayConfig(c kafka.Config) ReplayConfig {
	return ReplayConfig{Bus: c, BatchRows: 250_000, Inserters: 2, RetentionDays: 30, CatchUpRecords: 200}
}

// Validate joins every problem of c.
func (c ReplayConfig) Validate() error {
	var errs []error
	if err := c.Bus.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.BatchRows < 1 || c.BatchRows > 1_000_000 {
		errs = append(errs, errors.New("requestlog replay: BatchRows must be 1..1000000"))
	}
	if c.Inserters < 1 || c.Inserters > 16 {
		errs = append(errs, errors.New("requestlog replay: Inserters must be 1..16"))
	}
	if c.RetentionDays < 1 {
		errs = append(errs, errors.New("requestlog replay: RetentionDays must be at least 1"))
	}
	if c.CatchUpRecords < 0 {
		errs = append(errs, errors.New("requestlog replay: CatchUpRecords must not be negative"))
	}
	return errors.Join(errs...)
}

// Progress reports done Kafka records out of total (the topic's records
// when the replay started plus what arrived since). Records, not events:
// a record packs many events and the count of events is known only once
// read.
type Progress func(done, total int64)

// ReplayResult is what a replay did.
type ReplayResult struct {
	Records  int64 // Kafka records read
	Events   int64 // rows inserted
	Poisoned int64 // records skipped as unreadable (the sink dead-lettered them)
	Swapped  bool
	Elapsed  time.Duration
	// Load is the time the bulk load took (reading the topic into the
	// shadow raw table), Rollups the time filling the rollups took.
	Load, Rollups time.Duration
}

// Replay rebuilds the request-log tables of conn's database from the
// topic and swaps them in, coordinating with the sink through pool's
// advisory locks and generation. Cancelling ctx before the swap leaves the
// live tables untouched and drops the shadow ones.
func Replay(ctx context.Context, cfg ReplayConfig, conn driver.Conn, pool *pgxpool.Pool, progress Progress) (ReplayResult, error) {
	if err := cfg.Validate(); err != nil {
		return ReplayResult{}, err
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	live := migrations.LiveRequestLogTables()
	r := &replayer{cfg: cfg, conn: conn, pool: pool, progress: progress, topic: cfg.Bus.Topic(kafka.TopicRequestLogs),
		live: live, shadow: live.Suffixed(ShadowSuffix), old: live.Suffixed(OldSuffix)}
	start := time.Now()
	err := r.run(ctx)
	r.res.Elapsed = time.Since(start)
	r.res.Records, r.res.Events, r.res.Poisoned = r.records.Load(), r.events.Load(), r.poisoned.Load()
	if err != nil {
		return r.res, fmt.Errorf("replay %s: %w", ReplayName, err)
	}
	return r.res, nil
}

type replayer struct {
	cfg                ReplayConfig
	conn               driver.Conn
	pool               *pgxpool.Pool
	progress           Progress
	topic              string
	live, shadow, old  migrations.RequestLogTables
	features           migrations.ClickHouseFeatures
	res                ReplayResult
	records, events    atomic.Int64
	poisoned, total    atomic.Int64
	progressMu         sync.Mutex
	client             sarama.Client
	partitions         []int32
	pos                map[int32]int64 // next offset to read, per partition
	in                 chan decoded
	b                  *batch
	work               chan *batch
	inflight           sync.WaitGroup
	inserters          sync.WaitGroup
	failed             chan error
	insertCtx          context.Context
	cancelInsert       context.CancelFunc
	consumerWG         sync.WaitGroup
	stopConsumers      chan struct{}
	partitionConsumers []sarama.PartitionConsumer
}

func (r *replayer) run(ctx context.Context) error {
	busy, err := r.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	var locked bool
	if err := busy.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, int32(replayClass), replayKey()).Scan(&locked); err != nil {
		busy.Release()
		return fmt.Errorf("lock: %w", err)
	}
	if !locked {
		busy.Release()
		return ErrBusy
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := busy.Exec(cctx, `SELECT pg_advisory_unlock($1, $2)`, int32(replayClass), replayKey()); err != nil {
			// Never hand a connection holding the lock back to the pool.
			_ = busy.Hijack().Close(cctx)
			return
		}
		busy.Release()
	}()

	if r.features, err = migrations.ServerFeatures(ctx, r.conn); err != nil {
		return err
	}
	// The live schema exists (a replay before the first serve) with its
	// views (a replay that died inside its swap re-creates them here).
	if err := migrations.UpRequestLog(ctx, r.conn, r.cfg.RetentionDays); err != nil {
		return err
	}
	// Leftovers of an interrupted replay: its shadow tables and views, and
	// old tables a swap renamed but did not drop.
	if err := r.dropShadow(ctx); err != nil {
		return err
	}
	for _, t := range r.old.All() {
		if err := r.conn.Exec(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
			return fmt.Errorf("drop leftover %s: %w", t, err)
		}
	}
	defer func() {
		if r.res.Swapped {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = r.dropShadow(cctx)
	}()
	// No views yet: the bulk load fills the raw table alone.
	for _, stmt := range migrations.RequestLogTableDDL(r.shadow, r.features, r.cfg.RetentionDays) {
		if err := r.conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create shadow tables: %w", err)
		}
	}

	if err := r.open(ctx); err != nil {
		return err
	}
	defer r.close()

	target, err := r.highWatermarks()
	if err != nil {
		return err
	}
	var total int64
	for _, p := range r.partitions {
		total += target[p] - r.pos[p]
	}
	r.total.Store(total)
	r.progress(0, total)
	start := time.Now()
	for {
		if err := r.consumeTo(ctx, target); err != nil {
			return err
		}
		next, err := r.highWatermarks()
		if err != nil {
			return err
		}
		if r.behind(next) <= r.cfg.CatchUpRecords {
			break
		}
		r.grow(target, next)
		target = next
	}
	// The rollups in one pass each over what the bulk load wrote, then the
	// views for the rest (nothing inserts meanwhile: the replay is the only
	// writer of its shadow).
	// One-level aggregation: a two-level one hands the insert 256 blocks,
	// each written as parts of every day it spans (a 36 s insert of 390k
	// minute rows against 2 s on 18.16).
	r.res.Load = time.Since(start)
	start = time.Now()
	fill := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"group_by_two_level_threshold": 0, "group_by_two_level_threshold_bytes": 0}))
	for _, stmt := range migrations.RequestLogRollupFill(r.shadow) {
		if err := r.conn.Exec(fill, stmt); err != nil {
			return fmt.Errorf("fill shadow rollups: %w", err)
		}
	}
	for _, stmt := range migrations.RequestLogViewDDL(r.shadow, r.features) {
		if err := r.conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create shadow views: %w", err)
		}
	}
	r.res.Rollups = time.Since(start)
	if r.cfg.BuildOnly {
		return nil
	}
	return r.catchUpAndSwap(ctx, target)
}

// dropShadow drops the shadow views, then the shadow tables.
func (r *replayer) dropShadow(ctx context.Context) error {
	for _, t := range append(r.shadow.Views(), r.shadow.All()...) {
		if err := r.conn.Exec(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
			return fmt.Errorf("drop shadow %s: %w", t, err)
		}
	}
	return nil
}

// open starts a partition consumer at the oldest offset of every
// partition, all feeding r.in, and the inserters.
func (r *replayer) open(ctx context.Context) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := kafka.EnsureTopics(ctx, r.cfg.Bus, quiet, kafka.TopicRequestLogs); err != nil {
		return err
	}
	sc := r.cfg.Bus.BulkConsumerSarama()
	// A replay reads a long backlog: large fetches, a deeper buffer.
	sc.Consumer.Fetch.Default = 8 << 20
	sc.ChannelBufferSize = 64
	client, err := sarama.NewClient(r.cfg.Bus.Brokers, sc)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	r.client = client
	if r.partitions, err = client.Partitions(r.topic); err != nil {
		return fmt.Errorf("kafka partitions of %s: %w", r.topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("kafka consumer: %w", err)
	}
	r.pos = map[int32]int64{}
	r.in = make(chan decoded, 256)
	r.stopConsumers = make(chan struct{})
	for _, p := range r.partitions {
		oldest, err := client.GetOffset(r.topic, p, sarama.OffsetOldest)
		if err != nil {
			return fmt.Errorf("kafka oldest offset of %s/%d: %w", r.topic, p, err)
		}
		r.pos[p] = oldest
		pc, err := consumer.ConsumePartition(r.topic, p, oldest)
		if err != nil {
			return fmt.Errorf("kafka consume %s/%d: %w", r.topic, p, err)
		}
		r.partitionConsumers = append(r.partitionConsumers, pc)
		r.consumerWG.Add(2)
		go func() {
			defer r.consumerWG.Done()
			for m := range pc.Messages() {
				// Decoded here, one goroutine per partition, so the
				// batch builder only appends rows.
				select {
				case r.in <- decode(m):
				case <-r.stopConsumers:
					return
				}
			}
		}()
		go func() {
			// sarama retries by itself; the errors only need draining.
			defer r.consumerWG.Done()
			for range pc.Errors() {
			}
		}()
	}
	r.b = newBatch()
	r.work = make(chan *batch)
	r.failed = make(chan error, r.cfg.Inserters)
	r.insertCtx, r.cancelInsert = context.WithCancel(ctx)
	r.inserters.Add(r.cfg.Inserters)
	for range r.cfg.Inserters {
		go r.inserter()
	}
	return nil
}

func (r *replayer) close() {
	if r.work != nil {
		r.cancelInsert()
		close(r.work)
		r.inserters.Wait()
	}
	if r.stopConsumers != nil {
		close(r.stopConsumers)
	}
	for _, pc := range r.partitionConsumers {
		pc.AsyncClose()
	}
	r.consumerWG.Wait()
	if r.client != nil {
		_ = r.client.Close()
	}
}

func (r *replayer) inserter() {
	defer r.inserters.Done()
	for b := range r.work {
		var err error
		if b.rows.Len() > 0 {
			err = b.rows.InsertInto(r.insertCtx, r.conn, r.shadow.Raw)
		}
		if err != nil {
			select {
			case r.failed <- err:
			default: // one is enough
			}
			r.cancelInsert()
		} else {
			r.events.Add(int64(b.rows.Len()))
			r.poisoned.Add(int64(len(b.poison)))
			done := r.records.Add(int64(b.records))
			r.progressMu.Lock()
			r.progress(done, r.total.Load())
			r.progressMu.Unlock()
		}
		r.inflight.Done()
	}
}

// highWatermarks are the next offsets to be written, per partition.
func (r *replayer) highWatermarks() (map[int32]int64, error) {
	out := make(map[int32]int64, len(r.partitions))
	for _, p := range r.partitions {
		off, err := r.client.GetOffset(r.topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("kafka high watermark of %s/%d: %w", r.topic, p, err)
		}
		out[p] = off
	}
	return out, nil
}

// behind is how many records the replay has yet to read up to hwm.
func (r *replayer) behind(hwm map[int32]int64) int64 {
	var n int64
	for _, p := range r.partitions {
		n += max(hwm[p]-r.pos[p], 0)
	}
	return n
}

// grow adds what arrived between two high-watermark readings to the total.
func (r *replayer) grow(from, to map[int32]int64) {
	var n int64
	for _, p := range r.partitions {
		n += to[p] - from[p]
	}
	r.total.Add(n)
}

// consumeTo reads every partition up to target (exclusive), inserts what
// it read, and returns once every insert is done.
func (r *replayer) consumeTo(ctx context.Context, target map[int32]int64) error {
	for r.behind(target) > 0 {
		select {
		case d := <-r.in:
			// Partition consumers deliver each partition in order, from the
			// oldest offset on: the shadow holds a prefix of every
			// partition, as the sink's skip-what-is-held logic expects.
			r.b.addDecoded(d)
			r.pos[d.msg.Partition] = d.msg.Offset + 1
			if r.b.rows.Len() >= r.cfg.BatchRows {
				if err := r.send(ctx); err != nil {
					return err
				}
			}
		case err := <-r.failed:
			return fmt.Errorf("insert into %s: %w", r.shadow.Raw, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := r.send(ctx); err != nil {
		return err
	}
	r.inflight.Wait()
	select {
	case err := <-r.failed:
		return fmt.Errorf("insert into %s: %w", r.shadow.Raw, err)
	default:
	}
	return ctx.Err()
}

// send hands the batch being built to an inserter.
func (r *replayer) send(ctx context.Context) error {
	if r.b.records == 0 {
		return nil
	}
	r.inflight.Add(1)
	select {
	case r.work <- r.b:
		r.b = newBatch()
		return nil
	case err := <-r.failed:
		r.inflight.Done()
		return fmt.Errorf("insert into %s: %w", r.shadow.Raw, err)
	case <-ctx.Done():
		r.inflight.Done()
		return ctx.Err()
	}
}

// catchUpAndSwap holds the sink back (the fence, exclusively), reads what
// is left and swaps the tables. The fence is a transaction-level lock:
// whatever ends this transaction (commit, an error, the process dying)
// releases it.
func (r *replayer) catchUpAndSwap(ctx context.Context, target map[int32]int64) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(cctx)
	}()
	// Waits for the sink's batch in flight; new ones wait behind it.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, int32(fenceClass), int32(fenceKey)); err != nil {
		return fmt.Errorf("hold the sink back: %w", err)
	}
	// Partitions added since the start would be missing from the shadow.
	if err := r.client.RefreshMetadata(r.topic); err != nil {
		return fmt.Errorf("kafka metadata of %s: %w", r.topic, err)
	}
	if now, err := r.client.Partitions(r.topic); err != nil || len(now) != len(r.partitions) {
		return errors.Join(fmt.Errorf("%s went from %d partitions to %d during the replay; run it again", r.topic, len(r.partitions), len(now)), err)
	}
	final, err := r.highWatermarks()
	if err != nil {
		return err
	}
	r.grow(target, final)
	if err := r.consumeTo(ctx, final); err != nil {
		return err
	}

	// From here on the swap runs to its end whatever happens to ctx: a
	// half-done swap is worse than a late Ctrl-C.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, err := migrations.DropExpiredRequestLogTables(sctx, r.conn, r.shadow, r.cfg.RetentionDays, time.Now()); err != nil {
		return err
	}
	// The generation first, committed on its own: the sink reads it only
	// once the fence is free again, and a bump without a swap (the replay
	// dying right after it) only costs the sink a reload of its offsets.
	if _, err := r.pool.Exec(sctx, `UPDATE requestlog_generation SET generation = generation + 1`); err != nil {
		return fmt.Errorf("bump generation: %w", err)
	}
	if err := r.swap(sctx); err != nil {
		// Whatever step failed, the live names get their views back.
		if uerr := migrations.UpRequestLog(sctx, r.conn, r.cfg.RetentionDays); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return err
	}
	r.res.Swapped = true
	if err := tx.Commit(sctx); err != nil {
		// The connection is gone with the lock; the swap stands.
		return fmt.Errorf("release the sink: %w", err)
	}
	for _, t := range r.old.All() {
		// Waits for queries still reading the old tables. A failure only
		// leaves them for the next replay to drop.
		_ = r.conn.Exec(sctx, "DROP TABLE IF EXISTS "+t)
	}
	return nil
}

// swap renames the shadow tables to the live names in one statement and
// points the views at them. Materialized views follow table names on
// ClickHouse 18.16 (Ordinary databases) but table identities on Atomic
// ones, so rather than rely on either, every view is dropped before the
// RENAME and the live ones are created after it; nothing inserts in
// between (the sink is held back by the fence).
func (r *replayer) swap(ctx context.Context) error {
	for _, v := range append(r.live.Views(), r.shadow.Views()...) {
		if err := r.conn.Exec(ctx, "DROP TABLE IF EXISTS "+v); err != nil {
			return fmt.Errorf("drop view %s: %w", v, err)
		}
	}
	var renames []string
	live, shadow, old := r.live.All(), r.shadow.All(), r.old.All()
	for i := range live {
		renames = append(renames, live[i]+" TO "+old[i])
	}
	for i := range live {
		renames = append(renames, shadow[i]+" TO "+live[i])
	}
	if err := r.conn.Exec(ctx, "RENAME TABLE "+strings.Join(renames, ", ")); err != nil {
		return fmt.Errorf("swap tables: %w", err)
	}
	for _, stmt := range migrations.RequestLogViewDDL(r.live, r.features) {
		if err := r.conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create live views: %w", err)
		}
	}
	return nil
}

// ReplayStatus is the projection's line of `cfgd replay --list`.
type ReplayStatus struct {
	Name   string
	Tables []string
	// Position is the sum over partitions of the offsets the live sink's
	// group committed; Lag is the sum of high watermarks minus them.
	Position, Lag int64
}

// Status reports the live sink's position on the topic (its consumer
// group is group).
func Status(ctx context.Context, c kafka.Config, group string) (ReplayStatus, error) {
	st := ReplayStatus{Name: ReplayName, Tables: migrations.LiveRequestLogTables().All()}
	sc := c.Sarama()
	// A listing answers quickly or says it cannot.
	sc.Net.DialTimeout = 2 * time.Second
	sc.Metadata.Retry.Max = 1
	client, err := sarama.NewClient(c.Brokers, sc)
	if err != nil {
		return st, fmt.Errorf("kafka: %w", err)
	}
	defer client.Close()
	topic := c.Topic(kafka.TopicRequestLogs)
	parts, err := client.Partitions(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return st, nil // nothing produced yet
	}
	if err != nil {
		return st, fmt.Errorf("kafka partitions of %s: %w", topic, err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return st, fmt.Errorf("kafka admin: %w", err)
	}
	offs, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		return st, fmt.Errorf("offsets of group %s: %w", group, err)
	}
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		hwm, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return st, fmt.Errorf("kafka high watermark of %s/%d: %w", topic, p, err)
		}
		committed := int64(-1)
		if b := offs.GetBlock(topic, p); b != nil {
			committed = b.Offset
		}
		if committed < 0 {
			// Nothing committed yet: the group starts at the oldest record.
			if committed, err = client.GetOffset(topic, p, sarama.OffsetOldest); err != nil {
				return st, fmt.Errorf("kafka oldest offset of %s/%d: %w", topic, p, err)
			}
		}
		st.Position += committed
		st.Lag += max(hwm-committed, 0)
	}
	return st, nil
}
