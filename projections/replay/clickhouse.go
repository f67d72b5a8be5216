package replay

// The ClickHouse target rebuilds the request-log tables from the
// request-log topic. The tables are rebuilt beside the live ones under a
// suffix (requestlog_raw__replay and its rollups) with the live sink's own
// rows and ids (its Codec), read with plain partition consumers from the
// oldest offset of every partition. The bulk of the topic goes into the
// raw table alone; the rollups are then filled in one pass each and get
// their own materialized views for the rest. Once nearly caught up, the
// swap takes the fence exclusively (the sink finishes its batch and
// waits), reads the rest, and swaps: one RENAME moves the live tables to
// __old and the shadow ones to the live names, the views are re-created so
// the live raw table feeds the live rollups, the generation is bumped, the
// fence is released, and the __old tables are dropped. Queries read the
// old tables until that RENAME.
//
// On a cluster (ClickHouseConfig.Cluster) every set is the cluster's
// layout: replicated tables <name>_local on every node under Distributed
// tables <name>, all created and dropped ON CLUSTER. The shadow set's
// replicated tables get ZooKeeper paths of their own (a table keeps its
// path when renamed), the replay inserts and fills the rollups through
// the shadow Distributed tables (synchronously: each insert returns once
// its shard holds the rows), and the swap renames the replicated tables
// server by server (swapCluster): the live Distributed tables name the
// table they read, so they read the rebuilt ones from then on. A swap
// stopped half way (18.16 renames one table at a time, and a replicated
// table's rename can fail on ZooKeeper) keeps the rebuilt tables and is
// finished by a retry, or by the next replay before anything else.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// readBatch is how many records of a partition are decoded and handed to
// the batch builder at once, readAhead how many records at most wait
// decoded for it: a record holds up to REQUESTLOG__PACK_EVENTS rows, so
// more only costs memory and garbage collection.
const (
	readBatch = 16
	readAhead = 256
)

// RequestLogName is the request-log tables' name for `cfgd replay`.
const RequestLogName = "requestlog.clickhouse"

// Suffixes of a ClickHouse replay's tables: the shadow tables it builds,
// and the live tables between the swap and their drop.
const (
	ShadowSuffix = "__replay"
	OldSuffix    = "__old"
)

// Codec is how the live sink turns the topic's records into rows: a
// rebuild builds the same rows, with the same ids.
type Codec interface {
	// Start runs before the topic is read (it exists then): say, loading
	// what the decoding depends on.
	Start(ctx context.Context) error
	// Decode reads one record; it runs on one goroutine per partition.
	Decode(m *sarama.ConsumerMessage) Decoded
	// NewBlock returns an empty block of rows for one insert, with room
	// for rows rows and the record that takes it past them.
	NewBlock(rows int) Block
}

// Decoded is a record a Codec read, handed to Block.Add in partition
// order.
type Decoded interface {
	Message() *sarama.ConsumerMessage
	// Newer is *events.ErrNewerSchema for a record only a newer cfgd
	// understands: the rebuild stops there (it would lack the record).
	Newer() error
}

// Block is the rows of one insert into a shadow raw table.
type Block interface {
	// Add adds a record's rows, or counts it as poisoned when the sink
	// would have dead-lettered it.
	Add(d Decoded)
	Rows() int
	Records() int
	Poisoned() int
	// Insert writes the rows in one INSERT into table.
	Insert(ctx context.Context, conn driver.Conn, table string) error
	// Reset empties the block for another insert, keeping its room.
	Reset()
}

// ClickHouseConfig tunes a ClickHouse replay.
type ClickHouseConfig struct {
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
	// AllowPartial swaps a rebuild in although the live tables hold rows
	// whose records Kafka's retention has deleted (they are lost);
	// without it such a replay is refused with ErrPartial.
	AllowPartial bool
	// Cluster is the ClickHouse cluster the tables span
	// (CLICKHOUSE__CLUSTER; empty: one server), in the database of the
	// replay's connection.
	Cluster string
	// Dial reaches one server of the cluster: expired partitions of the
	// rebuilt tables are dropped shard by shard, as the sink's retention
	// does. Required with Cluster.
	Dial requestlogview.Dialer
	// SwapPatience bounds how long a swap on a cluster asks a server
	// again that does not answer or fails (0: DefaultSwapPatience).
	SwapPatience time.Duration
}

// DefaultClickHouseConfig returns the defaults for bus c.
func DefaultClickHouseConfig(c kafka.Config) ClickHouseConfig {
	return ClickHouseConfig{Bus: c, BatchRows: 250_000, Inserters: 2, RetentionDays: 30, CatchUpRecords: 200}
}

// Validate joins every problem of c.
func (c ClickHouseConfig) Validate() error {
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
	if err := requestlogview.ValidClusterName(c.Cluster); err != nil {
		errs = append(errs, fmt.Errorf("requestlog replay: %w", err))
	}
	if c.Cluster != "" && c.Dial == nil {
		errs = append(errs, errors.New("requestlog replay: a cluster needs Dial to reach each shard"))
	}
	return errors.Join(errs...)
}

// ErrPartial refuses to replace the request-log tables with a rebuild
// that lacks rows they hold: Kafka's retention deleted the records those
// rows came from, or the rebuild could not read records the live sink
// stored (dead-lettered now, e.g. unsigned records an older cfgd wrote).
// Kafka must keep the request-log topic at least as long as ClickHouse
// keeps the rows (CLICKHOUSE__RETENTION_DAYS), or the replay needs
// AllowPartial (`cfgd replay --allow-partial`).
var ErrPartial = errors.New("the rebuild would lose rows the live tables hold")

// Loss is what a rebuild would lose: live rows, within the retention, of
// records the topic no longer holds (Rows, on Days), and of records the
// topic holds but the rebuild dead-lettered (Unread).
type Loss struct {
	Rows int64
	// Days are the UTC days of those rows (2006-01-02), oldest first.
	Days   []string
	Unread int64
}

// Error describes l as ErrPartial.
func (l Loss) Error() string {
	var parts []string
	if l.Rows > 0 {
		parts = append(parts, fmt.Sprintf("Kafka's retention has deleted the records of %d rows the live request-log tables hold (days %s, UTC); "+
			"keep the request-log topic at least as long as CLICKHOUSE__RETENTION_DAYS", l.Rows, strings.Join(l.Days, ", ")))
	}
	if l.Unread > 0 {
		parts = append(parts, fmt.Sprintf("the rebuild dead-lettered records of %d rows the live request-log tables hold "+
			"(see the dead-letter topic: records from before signed bus records, or signed with a key this cfgd does not have)", l.Unread))
	}
	return strings.Join(parts, "; ") + "; run the replay with --allow-partial to rebuild without them"
}

// Unwrap makes a Loss ErrPartial.
func (l Loss) Unwrap() error { return ErrPartial }

// ClickHouse is the Target of the request-log tables. Its progress counts
// Kafka records, not events: a record packs many events and the count of
// events is known only once read.
type ClickHouse struct {
	cfg               ClickHouseConfig
	conn              driver.Conn
	fence             PostgresFence
	codec             Codec
	progress          Progress
	topic             string
	live, shadow, old requestlogview.Tables
	res               Result
	records, events   atomic.Int64
	poisoned, total   atomic.Int64
	progressMu        sync.Mutex
	reader            *kafka.Reader
	partitions        []int32
	pos               map[int32]int64 // next offset to read, per partition
	first             map[int32]int64 // offset of the first record read, per partition
	target            map[int32]int64 // where the build stopped reading
	b                 Block
	work              chan Block
	free              chan Block // inserted blocks, emptied for reuse
	inflight          sync.WaitGroup
	inserters         sync.WaitGroup
	failed            chan error
	insertCtx         context.Context
	cancelInsert      context.CancelFunc

	// cluster is the cluster and database (zero: one server).
	cluster requestlogview.Cluster
	// building: Shadow got as far as creating the shadow tables.
	building bool
	// swapping: the swap began on a cluster; from then on the shadow
	// tables are the rebuilt set a retry puts in place, never dropped.
	swapping bool
}

var _ Target = (*ClickHouse)(nil)

// NewClickHouse returns the target that rebuilds the request-log tables of
// conn's database from the topic, with codec's rows; it coordinates with
// the live sink through pool's fence (PostgresFence).
func NewClickHouse(cfg ClickHouseConfig, conn driver.Conn, pool *pgxpool.Pool, codec Codec) (*ClickHouse, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	live := requestlogview.LiveTables()
	return &ClickHouse{cfg: cfg, conn: conn, fence: PostgresFence{Pool: pool}, codec: codec, topic: cfg.Bus.Topic(kafka.TopicRequestLogs),
		live: live, shadow: live.Suffixed(ShadowSuffix), old: live.Suffixed(OldSuffix)}, nil
}

// Name implements Target.
func (r *ClickHouse) Name() string { return RequestLogName }

// Result implements Target.
func (r *ClickHouse) Result() Result {
	res := r.res
	res.Records, res.Events, res.Poisoned = r.records.Load(), r.events.Load(), r.poisoned.Load()
	return res
}

// Shadow implements Target: it creates the shadow tables, reads the topic
// into the raw one until it is at most CatchUpRecords behind, then fills
// the rollups and gives them their views.
func (r *ClickHouse) Shadow(ctx context.Context, progress Progress) (err error) {
	r.progress = progress
	defer func() {
		if err != nil && r.res.Resumed {
			err = fmt.Errorf("the swap an interrupted replay began is finished (the live tables are whole), but the new rebuild failed: %w", err)
		}
	}()
	if r.cfg.Cluster != "" {
		var db string
		if err := r.conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&db); err != nil {
			return fmt.Errorf("request-log database: %w", err)
		}
		r.cluster = requestlogview.Cluster{Name: r.cfg.Cluster, Database: db}
		if err := r.cluster.Validate(); err != nil {
			return err
		}
	}
	if err := r.tidy(ctx); err != nil {
		return err
	}
	r.building = true
	// No views yet: the bulk load fills the raw table alone.
	stmts, err := requestlogview.TableDDL(r.shadow)
	if r.cluster.On() {
		// Paths no earlier replay's tables can hold: they only grow.
		stmts, err = requestlogview.ClusterTableDDL(r.shadow, r.cluster,
			fmt.Sprintf("_%x", time.Now().UnixNano()))
	}
	if err != nil {
		return err
	}
	for _, stmt := range stmts {
		if err := r.conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create shadow tables: %w", err)
		}
	}

	if err := r.open(ctx); err != nil {
		return err
	}
	// Before the long rebuild: does the topic still hold every row's
	// record? (Checked again before the swap, against what was read.)
	if err := r.checkLoss(ctx, r.pos); err != nil {
		return err
	}
	target, err := r.reader.Ends(r.topic)
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
		next, err := r.reader.Ends(r.topic)
		if err != nil {
			return err
		}
		if r.behind(next) <= r.cfg.CatchUpRecords {
			break
		}
		r.grow(target, next)
		target = next
	}
	r.target = target
	// The rollups in one pass each over what the bulk load wrote, then the
	// views for the rest (nothing inserts meanwhile: the replay is the only
	// writer of its shadow).
	// One-level aggregation: a two-level one hands the insert 256 blocks,
	// each written as parts of every day it spans (a 36 s insert of 390k
	// minute rows against 2 s on 18.16).
	r.res.Load = time.Since(start)
	start = time.Now()
	fill := r.settings(ctx, clickhouse.Settings{"group_by_two_level_threshold": 0, "group_by_two_level_threshold_bytes": 0})
	// On a cluster these read and write the Distributed tables: each
	// rollup row goes to the shard of its partition, as the views would
	// have sent it.
	if err := r.fillRollups(fill); err != nil {
		return err
	}
	if err := r.createViews(ctx, r.shadow); err != nil {
		return fmt.Errorf("create shadow views: %w", err)
	}
	r.res.Rollups = time.Since(start)
	return nil
}

// The minute rollup is filled in time ranges of about fillRangeRows raw
// rows, at least fillRanges of them, at most Inserters at a time. It costs
// 2-3 times the raw insert (nearly as many rows, each of 27 aggregate
// states); in ranges of 500,000 rows two at a time its fill took a third
// less than in one pass (smaller hash tables, no merge of two large ones;
// 12 ranges were no faster than 4: docs/benchmarks.md).
const (
	fillRanges    = 4
	fillRangeRows = 500_000
)

// fillRollups fills the shadow rollups from the shadow raw table: the
// minutes in time ranges, Inserters at once, then the hours from the
// minutes and the days from the hours.
func (r *ClickHouse) fillRollups(ctx context.Context) error {
	if err := r.awaitRaw(ctx); err != nil {
		return err
	}
	var lo, hi uint32
	if err := r.conn.QueryRow(ctx, "SELECT toUInt32(min(created_at)), toUInt32(max(created_at)) FROM "+r.shadow.Raw).Scan(&lo, &hi); err != nil {
		return fmt.Errorf("fill shadow rollups: time range: %w", err)
	}
	ranges := max(fillRanges, int(r.events.Load()/fillRangeRows))
	f, err := requestlogview.RollupFill(r.shadow, fillEdges(int64(lo), int64(hi), ranges)...)
	if err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	slots := make(chan struct{}, r.cfg.Inserters)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error // the failure that stopped the others
	)
	for _, stmt := range f.Minutes {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := r.conn.Exec(mctx, stmt); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("fill shadow rollups: %w", first)
	}
	for _, stmt := range f.Coarser {
		if err := r.conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("fill shadow rollups: %w", err)
		}
	}
	return r.checkRollups(ctx)
}

// rawPatience bounds how long awaitRaw waits for a replica to fetch what
// it missed.
const rawPatience = 2 * time.Minute

// awaitRaw waits until the shadow raw table reads back every row the
// replay inserted, on a cluster (one server reads its own). A shard's
// first replica that failed during the load (the inserts went to the
// other one) and came back is read again at once, and reads short until
// it has fetched what it missed: the rollups filled from it would lack
// those rows.
func (r *ClickHouse) awaitRaw(ctx context.Context) error {
	if !r.cluster.On() {
		return nil
	}
	want := uint64(r.events.Load())
	ctx, cancel := context.WithTimeout(ctx, rawPatience)
	defer cancel()
	wait := 100 * time.Millisecond
	for {
		var n uint64
		if err := r.conn.QueryRow(ctx, "SELECT count() FROM "+r.shadow.Raw).Scan(&n); err != nil {
			return fmt.Errorf("fill shadow rollups: count the rows read back: %w", err)
		}
		if n == want {
			return nil
		}
		if n > want {
			return fmt.Errorf("fill shadow rollups: %s holds %d rows, more than the %d inserted", r.shadow.Raw, n, want)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fill shadow rollups: %s reads %d of the %d rows inserted after %v: a replica is behind; run the replay again once the cluster is healthy",
				r.shadow.Raw, n, want, rawPatience)
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// checkRollups checks, on a cluster, that every shadow rollup counts
// every row inserted: a replica that failed between two fill statements
// sends the next one's reads to the other replica, which may lack a part
// the first one took. The rebuild stops rather than swap in short
// statistics.
func (r *ClickHouse) checkRollups(ctx context.Context) error {
	if !r.cluster.On() {
		return nil
	}
	want := uint64(r.events.Load())
	for _, t := range r.shadow.Rollups() {
		var n uint64
		if err := r.conn.QueryRow(ctx, "SELECT countMerge(requests) FROM "+t).Scan(&n); err != nil {
			return fmt.Errorf("check shadow rollups: %w", err)
		}
		if n != want {
			return fmt.Errorf("check shadow rollups: %s counts %d of the %d requests inserted (a replica failed during the fill); run the replay again", t, n, want)
		}
	}
	return nil
}

// fillEdges splits the seconds [lo, hi] into at most n ranges on whole
// minutes (a minute's rows in one range), as the edges RollupFill takes.
func fillEdges(lo, hi int64, n int) []int64 {
	if hi < lo || n < 2 {
		return nil
	}
	lo -= lo % 60
	step := (hi - lo + 1 + int64(n) - 1) / int64(n)
	step += (60 - step%60) % 60
	edges := []int64{lo}
	for e := lo + step; e <= hi; e += step {
		edges = append(edges, e)
	}
	return append(edges, hi+1)
}

// settings returns ctx carrying settings for the replay's statements on
// its own (shadow) tables. On a cluster also:
//   - insert_distributed_sync: an insert into a Distributed table returns
//     once every shard holds its rows, so what is read next (the rollups
//     from the raw table) sees them;
//   - max_replica_delay_for_distributed_queries 0: no stale-replica check.
//     cfgd's connection on a cluster reads through replicas less than a
//     second behind only, with no fallback (requestlogview.CaughtUpReads), a
//     guard for tables other processes write. Right after the bulk load
//     every replica of a shard reports a delay: the second one fetches
//     the parts, and the first one has its own inserts queued as no-ops
//     until its queue runs them, seconds on a loaded machine. A fill
//     failed on that with ALL_REPLICAS_ARE_STALE. The replay reads, like
//     it inserts, through each shard's first replica up (load_balancing
//     in_order), which holds what it inserted; a first replica that failed
//     during the load and came back may not, which awaitRaw and
//     checkRollups catch.
func (r *ClickHouse) settings(ctx context.Context, s clickhouse.Settings) context.Context {
	if r.cluster.On() {
		s = maps.Clone(s)
		if s == nil {
			s = clickhouse.Settings{}
		}
		s["insert_distributed_sync"] = 1
		s["max_replica_delay_for_distributed_queries"] = 0
	}
	if len(s) == 0 {
		return ctx
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(s))
}

// name is table as DDL names it: on a cluster qualified with the database
// (ON CLUSTER runs in database default on the other servers).
func (r *ClickHouse) name(table string) string {
	if r.cluster.On() {
		return r.cluster.Database + "." + table
	}
	return table
}

// onCluster ends a DDL statement that every server of the cluster runs.
func (r *ClickHouse) onCluster() string {
	if r.cluster.On() {
		return " ON CLUSTER " + r.cluster.Name
	}
	return ""
}

// stored are the tables of set t that hold its rows: t's own on one
// server, the replicated tables under t's Distributed tables on a cluster.
func (r *ClickHouse) stored(t requestlogview.Tables) []string {
	if r.cluster.On() {
		return t.Suffixed(requestlogview.LocalSuffix).All()
	}
	return t.All()
}

// drop drops tables (of a set that is what), if they exist; on a cluster
// on every server, the replicated tables' ZooKeeper paths with them.
func (r *ClickHouse) drop(ctx context.Context, what string, tables ...string) error {
	for _, t := range tables {
		if err := r.conn.Exec(ctx, "DROP TABLE IF EXISTS "+r.name(t)+r.onCluster()); err != nil {
			return fmt.Errorf("drop %s %s: %w", what, t, err)
		}
	}
	return nil
}

// tidy makes sure the live tables exist (a replay before the first
// serve) with their views (a replay that died inside its swap re-creates
// them here), and drops what an interrupted replay left: its shadow tables
// and views, and old tables a swap renamed but did not drop. On a cluster
// it first finishes a swap an earlier replay began (resume).
func (r *ClickHouse) tidy(ctx context.Context) error {
	leftovers := append(r.shadow.Views(), r.stored(r.old)...)
	if r.cluster.On() {
		leftovers = append(leftovers, r.shadow.All()...)
	}
	leftovers = append(leftovers, r.stored(r.shadow)...)
	if !r.cluster.On() {
		if err := r.createLive(ctx); err != nil {
			return err
		}
		return r.drop(ctx, "leftover", leftovers...)
	}
	// On a cluster each statement waits for every server (a tenth of a
	// second or more, up to distributed_ddl_task_timeout for one that is
	// down): refuse while one is down, create only what is missing, drop
	// only what is there. What is there is asked of every server (a
	// half-done swap differs from server to server), after the no-op
	// CREATE DATABASE ... ON CLUSTER below: each server runs those statements in the order they were
	// issued and it returns once every server ran it, so all ran what
	// came before (a killed replay's last statements too).
	if err := r.allReplicasActive(ctx); err != nil {
		return err
	}
	if err := r.conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+r.cluster.Database+r.onCluster()); err != nil {
		return fmt.Errorf("clickhouse cluster %s: %w", r.cluster.Name, err)
	}
	servers, err := r.serverTables(ctx)
	if err != nil {
		return err
	}
	if r.swapBegun(servers) {
		if err := r.resume(ctx); err != nil {
			return err
		}
		if servers, err = r.serverTables(ctx); err != nil {
			return err
		}
	}
	if err := r.createLiveOn(ctx, servers); err != nil {
		return err
	}
	var there []string
	for _, t := range leftovers {
		for _, have := range servers {
			if have[t] {
				there = append(there, t)
				break
			}
		}
	}
	return r.drop(ctx, "leftover", there...)
}

// serverTables lists the request-log tables and views on every server of
// the cluster, by address.
func (r *ClickHouse) serverTables(ctx context.Context) (map[string]map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.swapPatience())
	defer cancel()
	out := map[string]map[string]bool{}
	err := r.onEveryServer(ctx, "list the request-log tables", func(ctx context.Context, addr string, conn driver.Conn) error {
		have, err := r.tablesOn(ctx, conn)
		out[addr] = have
		return err
	})
	return out, err
}

// tablesOn lists the request-log tables and views on conn's server.
func (r *ClickHouse) tablesOn(ctx context.Context, conn driver.Conn) (map[string]bool, error) {
	rows, err := conn.Query(ctx, "SELECT name FROM system.tables WHERE database = ? AND startsWith(name, 'requestlog')", r.cluster.Database)
	if err != nil {
		return nil, fmt.Errorf("request-log tables: %w", err)
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("request-log tables: %w", err)
		}
		have[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("request-log tables: %w", err)
	}
	return have, nil
}

// swapBegun tells whether a swap on the cluster renamed some tables and
// not others: a server holds a live table renamed to __old while a server
// still holds a rebuilt one under the shadow name. Only a swap makes
// both: tidy drops every __old table before a replay builds its shadow.
func (r *ClickHouse) swapBegun(servers map[string]map[string]bool) bool {
	var old, shadow bool
	for _, have := range servers {
		for _, t := range r.stored(r.old) {
			old = old || have[t]
		}
		for _, t := range r.stored(r.shadow) {
			shadow = shadow || have[t]
		}
	}
	return old && shadow
}

// resume finishes a swap an interrupted replay began on the cluster, with
// the sink held back, as that replay would have: its rebuilt tables are
// complete (a swap begins once they are caught up), so rolling forward
// loses nothing, while the old tables' renames cannot all be undone.
func (r *ClickHouse) resume(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.swapPatience())
	defer cancel()
	tx, err := r.fence.hold(sctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(sctx) }()
	// The sink reads its offsets again from the tables swapped in.
	if err := r.fence.bump(sctx); err != nil {
		return err
	}
	if err := r.swap(sctx); err != nil {
		return fmt.Errorf("finish the swap an interrupted replay began: %w", err)
	}
	// The shadow names are free again: this replay's own shadow is its to
	// drop should it fail.
	r.swapping = false
	r.res.Resumed = true
	if err := tx.Commit(sctx); err != nil {
		return fmt.Errorf("release the sink: %w", err)
	}
	return nil
}

// allReplicasActive refuses a replay on a cluster one of whose servers is
// down, as ZooKeeper sees the replicas of the live raw table on every
// shard (a shard down altogether fails the query).
func (r *ClickHouse) allReplicasActive(ctx context.Context) error {
	rows, err := r.conn.Query(ctx, "SELECT replica_name, active_replicas, total_replicas FROM cluster('"+r.cluster.Name+"', system, replicas) WHERE database = ? AND table = ?",
		r.cluster.Database, r.live.Raw+requestlogview.LocalSuffix)
	if err != nil {
		return fmt.Errorf("replicas of the request-log tables: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var replica string
		var active, total uint8
		if err := rows.Scan(&replica, &active, &total); err != nil {
			return fmt.Errorf("replicas of the request-log tables: %w", err)
		}
		if active < total {
			return fmt.Errorf("%d of the %d replicas of %s's shard are up: a replay on cluster %s needs every server (each of its statements runs ON CLUSTER); start them and run it again",
				active, total, replica, r.cluster.Name)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("replicas of the request-log tables: %w", err)
	}
	return nil
}

// createLive creates what is missing of the live tables and views on one
// server, as the ClickHouse migration would (createLiveOn on a cluster).
func (r *ClickHouse) createLive(ctx context.Context) error {
	return requestlogview.CreateTables(ctx, r.conn, r.live)
}

// createLiveOn is createLive on a cluster whose servers hold the tables
// servers lists. A live replicated table missing on every server is
// created under a ZooKeeper path of its own, never the migration's (an
// __old table a swap renamed may still hold that one: CREATE would fail
// with "Replica ... already exists"); one missing on some servers only is
// refused, as creating it there would start an empty replica set beside
// its shard's (a swap half done is finished by resume before this).
func (r *ClickHouse) createLiveOn(ctx context.Context, servers map[string]map[string]bool) error {
	complete := true
	for _, t := range append(append(r.live.All(), r.live.Views()...), r.stored(r.live)...) {
		for _, have := range servers {
			complete = complete && have[t]
		}
	}
	if complete {
		return nil
	}
	for _, t := range r.stored(r.live) {
		var missing []string
		for addr, have := range servers {
			if !have[t] {
				missing = append(missing, addr)
			}
		}
		if len(missing) > 0 && len(missing) < len(servers) {
			slices.Sort(missing)
			return fmt.Errorf("clickhouse request-log schema: %s.%s is missing on %s but not on the other servers of cluster %s, and no replay's swap is half done: "+
				"create it there as a replica of its shard's (the ZooKeeper path of system.replicas on the other replica), then run the replay again",
				r.cluster.Database, t, strings.Join(missing, ", "), r.cluster.Name)
		}
	}
	stmts, err := requestlogview.ClusterTableDDL(r.live, r.cluster, fmt.Sprintf("_%x", time.Now().UnixNano()))
	if err != nil {
		return err
	}
	for _, stmt := range stmts {
		if err := r.conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("clickhouse request-log schema: %w", err)
		}
	}
	if err := r.createViews(ctx, r.live); err != nil {
		return fmt.Errorf("clickhouse request-log schema: %w", err)
	}
	return nil
}

// createViews creates the materialized views of set t: on a cluster on
// every server, over its replicated tables.
func (r *ClickHouse) createViews(ctx context.Context, t requestlogview.Tables) error {
	views, err := requestlogview.ViewDDL(t)
	if r.cluster.On() {
		views, err = requestlogview.ClusterViewDDL(t, r.cluster)
	}
	if err != nil {
		return err
	}
	for _, stmt := range views {
		if err := r.conn.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// Swap implements Target: it holds the sink back, reads what is left and
// renames the shadow tables in.
func (r *ClickHouse) Swap(ctx context.Context) error {
	defer r.close()
	return r.catchUpAndSwap(ctx, r.target)
}

// Drop implements Target: the shadow views, then the shadow tables, if
// Shadow began to create them.
func (r *ClickHouse) Drop(ctx context.Context) error {
	r.close()
	if r.swapping {
		// A swap half done is finished by a retry, from these tables.
		return nil
	}
	if !r.building {
		// Nothing built: no statement (on a cluster one would wait for a
		// server that is down, the reason Shadow may have stopped).
		return nil
	}
	return r.dropShadow(ctx)
}

// dropShadow drops the shadow views, then the shadow tables (on a
// cluster the Distributed ones, then the replicated ones).
func (r *ClickHouse) dropShadow(ctx context.Context) error {
	tables := r.shadow.Views()
	if r.cluster.On() {
		tables = append(tables, r.shadow.All()...)
	}
	return r.drop(ctx, "shadow", append(tables, r.stored(r.shadow)...)...)
}

// open connects the topic's reader, notes where every partition starts
// and starts the inserters.
func (r *ClickHouse) open(ctx context.Context) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := kafka.EnsureTopics(ctx, r.cfg.Bus, quiet, kafka.TopicRequestLogs); err != nil {
		return err
	}
	if err := r.codec.Start(ctx); err != nil {
		return err
	}
	reader, err := kafka.NewReader(r.cfg.Bus)
	if err != nil {
		return err
	}
	r.reader = reader
	if r.pos, err = reader.Starts(r.topic); err != nil {
		return err
	}
	r.first = map[int32]int64{}
	r.partitions = r.partitions[:0]
	for p := range r.pos {
		r.partitions = append(r.partitions, p)
	}
	r.free = make(chan Block, r.cfg.Inserters+1)
	r.b = r.newBlock()
	r.work = make(chan Block)
	r.failed = make(chan error, r.cfg.Inserters)
	r.insertCtx, r.cancelInsert = context.WithCancel(r.settings(ctx, nil))
	r.inserters.Add(r.cfg.Inserters)
	for range r.cfg.Inserters {
		go r.inserter()
	}
	return nil
}

// close stops the inserters and the reader open started; a second call
// does nothing.
func (r *ClickHouse) close() {
	if r.work != nil {
		r.cancelInsert()
		close(r.work)
		r.inserters.Wait()
		r.work = nil
	}
	if r.reader != nil {
		_ = r.reader.Close()
		r.reader = nil
	}
}

func (r *ClickHouse) inserter() {
	defer r.inserters.Done()
	for b := range r.work {
		var err error
		if b.Rows() > 0 {
			err = b.Insert(r.insertCtx, r.conn, r.shadow.Raw)
		}
		if err != nil {
			select {
			case r.failed <- err:
			default: // one is enough
			}
			r.cancelInsert()
		} else {
			r.events.Add(int64(b.Rows()))
			r.poisoned.Add(int64(b.Poisoned()))
			done := r.records.Add(int64(b.Records()))
			r.progressMu.Lock()
			r.progress(done, r.total.Load())
			r.progressMu.Unlock()
			b.Reset()
			select {
			case r.free <- b:
			default:
			}
		}
		r.inflight.Done()
	}
}

// newBlock is an inserted block emptied, or a new one: a block of
// BatchRows rows is tens of megabytes, and allocating (and zeroing, and
// collecting) one per insert cost a tenth of a replay's CPU.
func (r *ClickHouse) newBlock() Block {
	select {
	case b := <-r.free:
		return b
	default:
		return r.codec.NewBlock(r.cfg.BatchRows)
	}
}

// behind is how many records the replay has yet to read up to hwm.
func (r *ClickHouse) behind(hwm map[int32]int64) int64 {
	var n int64
	for _, p := range r.partitions {
		n += max(hwm[p]-r.pos[p], 0)
	}
	return n
}

// grow adds what arrived between two high-watermark readings to the total.
func (r *ClickHouse) grow(from, to map[int32]int64) {
	var n int64
	for _, p := range r.partitions {
		n += to[p] - from[p]
	}
	r.total.Add(n)
}

// consumeTo reads every partition from where it stopped up to target
// (exclusive), inserts what it read, and returns once every insert is
// done.
func (r *ClickHouse) consumeTo(ctx context.Context, target map[int32]int64) error {
	if r.behind(target) == 0 {
		return nil
	}
	rctx, cancel := context.WithCancel(ctx)
	in := make(chan []Decoded, readAhead/readBatch)
	read := make(chan error, 1)
	// The loop below moves r.pos on while the reader runs.
	from := maps.Clone(r.pos)
	go func() {
		defer close(in)
		_, err := r.reader.ReadConcurrently(rctx, r.topic, from, target, readBatch, func(ctx context.Context, _ int32, msgs []*sarama.ConsumerMessage) error {
			// Decoded here, one goroutine per partition, so the batch
			// builder only appends rows.
			ds := make([]Decoded, len(msgs))
			for i, m := range msgs {
				ds[i] = r.codec.Decode(m)
			}
			select {
			case in <- ds:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		read <- err
	}()
	defer func() {
		// Stop the reader (a no-op once it is done) and wait for it.
		cancel()
		for range in {
		}
	}()
	for ds := range in {
		// Each partition arrives in order, from where the last pass
		// stopped: the shadow holds a prefix of every partition, as the
		// sink's skip-what-is-held logic expects.
		for _, d := range ds {
			if err := d.Newer(); err != nil {
				m := d.Message()
				return fmt.Errorf("%s partition %d offset %d: %w", m.Topic, m.Partition, m.Offset, err)
			}
			r.b.Add(d)
			m := d.Message()
			if _, ok := r.first[m.Partition]; !ok {
				r.first[m.Partition] = m.Offset
			}
			r.pos[m.Partition] = m.Offset + 1
			// Record by record, not per read: a block holds at most one
			// record past BatchRows, the room NewBlock made.
			if r.b.Rows() >= r.cfg.BatchRows {
				if err := r.send(ctx); err != nil {
					return err
				}
			}
		}
	}
	if err := <-read; err != nil {
		select {
		case ierr := <-r.failed:
			// An insert failed: the reader stopped because of it.
			return fmt.Errorf("insert into %s: %w", r.shadow.Raw, ierr)
		default:
		}
		return err
	}
	// Every range is read to its target, though its last record may sit
	// below it (offsets may skip).
	for _, p := range r.partitions {
		if r.pos[p] < target[p] {
			r.pos[p] = target[p]
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
func (r *ClickHouse) send(ctx context.Context) error {
	if r.b.Records() == 0 {
		return nil
	}
	r.inflight.Add(1)
	select {
	case r.work <- r.b:
		r.b = r.newBlock()
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
func (r *ClickHouse) catchUpAndSwap(ctx context.Context, target map[int32]int64) error {
	tx, err := r.fence.hold(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(cctx)
	}()
	final, err := r.reader.Ends(r.topic)
	if err != nil {
		return err
	}
	// Partitions added since the start would be missing from the shadow.
	if len(final) != len(r.partitions) {
		return fmt.Errorf("%s went from %d partitions to %d during the replay; run it again", r.topic, len(r.partitions), len(final))
	}
	r.grow(target, final)
	if err := r.consumeTo(ctx, final); err != nil {
		return err
	}
	// The sink is held back: the live rows are final. Those below the
	// first record read of their partition are missing from the shadow
	// (retention deleted them before the replay or while it read).
	below := make(map[int32]int64, len(r.partitions))
	for _, p := range r.partitions {
		below[p] = r.pos[p]
		if o, ok := r.first[p]; ok {
			below[p] = o
		}
	}
	if err := r.checkLoss(ctx, below); err != nil {
		return err
	}
	if err := r.checkUnread(ctx, below, final); err != nil {
		return err
	}

	// From here on the swap runs to its end whatever happens to ctx: a
	// half-done swap is worse than a late Ctrl-C.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute+r.swapPatience())
	defer cancel()
	if _, err := requestlogview.DropExpiredOn(sctx, r.conn, r.shadow, r.cluster, r.cfg.Dial, r.cfg.RetentionDays, time.Now()); err != nil {
		return err
	}
	// The generation first (see bump).
	if err := r.fence.bump(sctx); err != nil {
		return err
	}
	swctx, cancelSwap := context.WithTimeout(sctx, r.swapPatience())
	defer cancelSwap()
	if err := r.swap(swctx); err != nil {
		if r.cluster.On() {
			// Never undone: some servers may have swapped already.
			return fmt.Errorf("%w; the swap may be half done: run `cfgd replay %s` again, which finishes it first", err, RequestLogName)
		}
		// One RENAME: nothing or everything was renamed. Whatever step
		// failed, the live names get their views back.
		if uerr := r.createLive(sctx); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return err
	}
	// Whatever the commit says, the tables are swapped.
	r.res.Swapped = true
	if err := tx.Commit(sctx); err != nil {
		// The connection is gone with the lock; the swap stands.
		return fmt.Errorf("release the sink: %w", err)
	}
	// Waits for queries still reading the old tables. A failure only
	// leaves them for the next replay to drop. On a cluster the shadow
	// Distributed tables go too: they name tables that now have the live
	// names.
	var leftover []string
	if r.cluster.On() {
		leftover = r.shadow.All()
	}
	_ = r.drop(sctx, "old", append(leftover, r.stored(r.old)...)...)
	return nil
}

// checkLoss returns a Loss when the live raw table holds rows, inside the
// retention, of a partition's records below below[p]: a rebuild reading
// from there lacks them. With AllowPartial it notes them in the result
// instead.
func (r *ClickHouse) checkLoss(ctx context.Context, below map[int32]int64) error {
	// The sink stores a recreated topic's records after the old topic's
	// (PostgresFence.Recreated): the rows below that base are the old
	// topic's, which the rebuild lacks too.
	base, err := r.fence.bases(ctx, r.topic)
	if err != nil {
		return err
	}
	var conds []string
	args := []any{time.Now().UTC().AddDate(0, 0, -r.cfg.RetentionDays).Truncate(24 * time.Hour).Unix()}
	for p, o := range below {
		if o += base[p]; o > 0 {
			conds = append(conds, "(kafka_partition = ? AND kafka_offset < ?)")
			args = append(args, p, o)
		}
	}
	if len(conds) == 0 {
		return nil
	}
	// Days by UTC seconds, whatever the server's time zone.
	rows, err := r.conn.Query(ctx, "SELECT intDiv(toUInt32(created_at), 86400) AS day, count() FROM "+r.live.Raw+
		" WHERE created_at >= toDateTime(?) AND ("+strings.Join(conds, " OR ")+") GROUP BY day ORDER BY day", args...)
	if err != nil {
		return fmt.Errorf("compare %s with the topic: %w", r.live.Raw, err)
	}
	defer rows.Close()
	var l Loss
	for rows.Next() {
		var day uint32
		var n uint64
		if err := rows.Scan(&day, &n); err != nil {
			return fmt.Errorf("compare %s with the topic: %w", r.live.Raw, err)
		}
		l.Rows += int64(n)
		l.Days = append(l.Days, time.Unix(int64(day)*86400, 0).UTC().Format(time.DateOnly))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("compare %s with the topic: %w", r.live.Raw, err)
	}
	if l.Rows == 0 {
		return nil
	}
	if !r.cfg.AllowPartial {
		return l
	}
	r.res.Lost = max(r.res.Lost, l.Rows)
	return nil
}

// checkUnread returns a Loss when the live raw table holds more rows than
// the shadow of some partition's records the rebuild read (offsets from
// from[p] to below to[p], within the retention): records the live sink
// stored and the rebuild dead-lettered, such as unsigned records an older
// cfgd wrote. With AllowPartial it notes them in the result instead.
func (r *ClickHouse) checkUnread(ctx context.Context, from, to map[int32]int64) error {
	cutoff := time.Now().UTC().AddDate(0, 0, -r.cfg.RetentionDays).Truncate(24 * time.Hour).Unix()
	base, err := r.fence.bases(ctx, r.topic)
	if err != nil {
		return err
	}
	count := func(ctx context.Context, table string, shift map[int32]int64) (map[int32]int64, error) {
		var conds []string
		args := []any{cutoff}
		for _, p := range r.partitions {
			if from[p] < to[p] {
				conds = append(conds, "(kafka_partition = ? AND kafka_offset >= ? AND kafka_offset < ?)")
				args = append(args, p, from[p]+shift[p], to[p]+shift[p])
			}
		}
		out := map[int32]int64{}
		if len(conds) == 0 {
			return out, nil
		}
		rows, err := r.conn.Query(ctx, "SELECT kafka_partition, count() FROM "+table+
			" WHERE created_at >= toDateTime(?) AND ("+strings.Join(conds, " OR ")+") GROUP BY kafka_partition", args...)
		if err != nil {
			return nil, fmt.Errorf("compare %s with the rebuild: %w", table, err)
		}
		defer rows.Close()
		for rows.Next() {
			var p uint16
			var n uint64
			if err := rows.Scan(&p, &n); err != nil {
				return nil, fmt.Errorf("compare %s with the rebuild: %w", table, err)
			}
			out[int32(p)] = int64(n)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("compare %s with the rebuild: %w", table, err)
		}
		return out, nil
	}
	// The live sink stores a recreated topic's records above the old
	// topic's (PostgresFence.Recreated); the rebuild from offset 0.
	live, err := count(ctx, r.live.Raw, base)
	if err != nil {
		return err
	}
	shadow, err := count(r.settings(ctx, nil), r.shadow.Raw, nil)
	if err != nil {
		return err
	}
	var l Loss
	for p, n := range live {
		l.Unread += max(0, n-shadow[p])
	}
	if l.Unread == 0 {
		return nil
	}
	if !r.cfg.AllowPartial {
		return l
	}
	r.res.Lost += l.Unread
	return nil
}

// swap renames the shadow tables to the live names and points the views
// at them. Materialized views follow table names on ClickHouse 18.16
// (Ordinary databases) but table identities on Atomic ones, so rather than
// rely on either, every view is dropped before the renames and the live
// ones are created after them; nothing inserts in between (the sink is
// held back by the fence). On one server one RENAME swaps all the tables
// at once. On a cluster see swapCluster.
func (r *ClickHouse) swap(ctx context.Context) error {
	if r.cluster.On() {
		return r.swapCluster(ctx)
	}
	if err := r.drop(ctx, "view", append(r.live.Views(), r.shadow.Views()...)...); err != nil {
		return err
	}
	var renames []string
	live, shadow, old := r.stored(r.live), r.stored(r.shadow), r.stored(r.old)
	for i := range live {
		renames = append(renames, live[i]+" TO "+old[i])
	}
	for i := range live {
		renames = append(renames, shadow[i]+" TO "+live[i])
	}
	if err := r.conn.Exec(ctx, "RENAME TABLE "+strings.Join(renames, ", ")); err != nil {
		return fmt.Errorf("swap tables: %w", err)
	}
	if err := r.createViews(ctx, r.live); err != nil {
		return fmt.Errorf("create live views: %w", err)
	}
	return nil
}

// DefaultSwapPatience bounds how long a swap on a cluster waits for its
// servers: one that does not answer, or fails (a ZooKeeper session
// expiring in the middle of a rename), is asked again until then.
const DefaultSwapPatience = 2 * time.Minute

func (r *ClickHouse) swapPatience() time.Duration {
	if r.cfg.SwapPatience > 0 {
		return r.cfg.SwapPatience
	}
	return DefaultSwapPatience
}

// swapCluster swaps the replicated tables on every server of the
// cluster: the live Distributed tables name them, so they read the rebuilt
// ones. On 18.16 a RENAME of several tables is not atomic, and a
// replicated table's rename can fail on ZooKeeper, so a swap may stop with
// some servers or tables renamed and others not. Each step therefore runs
// server by server and table by table, each checked against what that
// server holds, and running it again finishes what is left: a live table
// is renamed to __old only while its rebuilt one is there to take its
// place, then the rebuilt one takes the live name. From its first step on
// the rebuilt tables are never dropped (Drop; tidy's resume).
func (r *ClickHouse) swapCluster(ctx context.Context) error {
	r.swapping = true
	views := append(r.live.Views(), r.shadow.Views()...)
	if err := r.onEveryServer(ctx, "drop the views", func(ctx context.Context, _ string, conn driver.Conn) error {
		for _, v := range views {
			if err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+r.name(v)); err != nil {
				return fmt.Errorf("drop view %s: %w", v, err)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := r.onEveryServer(ctx, "swap tables", r.renameOn); err != nil {
		return err
	}
	stmts, err := requestlogview.ServerViewDDL(r.live, r.cluster)
	if err != nil {
		return err
	}
	return r.onEveryServer(ctx, "create live views", func(ctx context.Context, _ string, conn driver.Conn) error {
		for _, stmt := range stmts {
			if err := conn.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
}

// renameOn swaps in the rebuilt tables conn's server still holds under
// the shadow names, one table at a time.
func (r *ClickHouse) renameOn(ctx context.Context, _ string, conn driver.Conn) error {
	have, err := r.tablesOn(ctx, conn)
	if err != nil {
		return err
	}
	live, shadow, old := r.stored(r.live), r.stored(r.shadow), r.stored(r.old)
	rename := func(from, to string) error {
		if err := conn.Exec(ctx, "RENAME TABLE "+r.name(from)+" TO "+r.name(to)); err != nil {
			return fmt.Errorf("rename %s to %s: %w", from, to, err)
		}
		return nil
	}
	for i := range live {
		if !have[shadow[i]] {
			if !have[live[i]] {
				return stuck{fmt.Errorf("neither %s nor its rebuilt %s is there", live[i], shadow[i])}
			}
			continue // swapped already
		}
		if have[live[i]] {
			if have[old[i]] {
				return stuck{fmt.Errorf("%s, %s and %s are all there: drop the one of them that is no request-log set's", live[i], shadow[i], old[i])}
			}
			if err := rename(live[i], old[i]); err != nil {
				return err
			}
		}
		if err := rename(shadow[i], live[i]); err != nil {
			return err
		}
	}
	return nil
}

// onEveryServer runs step on every server of the cluster in turn, on a
// connection of its own (Dial). A server that fails is asked again, a
// little later each time, until ctx ends: then the error names it.
func (r *ClickHouse) onEveryServer(ctx context.Context, what string, step func(ctx context.Context, addr string, conn driver.Conn) error) error {
	addrs, err := requestlogview.ClusterServers(ctx, r.conn, r.cluster.Name)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for _, addr := range addrs {
		wait := 100 * time.Millisecond
		for {
			err := r.onServer(ctx, addr, step)
			if err == nil {
				break
			}
			if errors.As(err, new(stuck)) {
				return fmt.Errorf("%s on server %s: %w", what, addr, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s on server %s: %w", what, addr, err)
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
		}
	}
	return nil
}

// stuck is a state of a server that asking again does not change.
type stuck struct{ error }

func (e stuck) Unwrap() error { return e.error }

func (r *ClickHouse) onServer(ctx context.Context, addr string, step func(ctx context.Context, addr string, conn driver.Conn) error) error {
	// One attempt never takes the whole patience.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := r.cfg.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	return step(ctx, addr, conn)
}

// clickhouseStatus reports the live sink's position on the request-log
// topic (its consumer group is group): the sum over partitions of the
// offsets it committed, and the high watermarks' sum minus that as lag.
func clickhouseStatus(ctx context.Context, c kafka.Config, group string) (Status, error) {
	st := Status{Streams: -1}
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
