package requestlogview

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing/fstest"
	"text/template"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The request-log tables in ClickHouse. The raw table holds one row per
// request; the rollups, fed by materialized views on every insert into the
// raw table, hold per-minute, per-hour and per-day aggregate states so
// statistics over long windows read thousands of rows, not millions.
const (
	RawTable    = "requestlog_raw"
	MinuteTable = "requestlog_minute"
	HourTable   = "requestlog_hour"
	DayTable    = "requestlog_day"
)

// Tables names one set of request-log tables: the live ones (LiveTables)
// or a replay's shadow copies beside them (Suffixed). The rollups'
// materialized views are named after their rollup with an "_mv" suffix.
type Tables struct{ Raw, Minute, Hour, Day string }

// LiveTables are the tables queries read and the sink writes.
func LiveTables() Tables {
	return Tables{Raw: RawTable, Minute: MinuteTable, Hour: HourTable, Day: DayTable}
}

// Suffixed returns t with suffix appended to every name.
func (t Tables) Suffixed(suffix string) Tables {
	return Tables{Raw: t.Raw + suffix, Minute: t.Minute + suffix, Hour: t.Hour + suffix, Day: t.Day + suffix}
}

// Rollups are the three rollups, finest first.
func (t Tables) Rollups() []string { return []string{t.Minute, t.Hour, t.Day} }

// All are the four tables, raw first.
func (t Tables) All() []string { return []string{t.Raw, t.Minute, t.Hour, t.Day} }

// rollupSeconds are the bucket sizes of the rollups, finest first.
var rollupSeconds = [...]int{60, 3600, 86400}

// RollupSeconds are the bucket sizes (seconds) of Rollups(), in their
// order.
func RollupSeconds() []int { return slices.Clone(rollupSeconds[:]) }

// Views are the materialized views feeding the rollups from the raw table.
func (t Tables) Views() []string {
	return []string{t.Minute + "_mv", t.Hour + "_mv", t.Day + "_mv"}
}

// durationBounds are the upper bounds (ms) of the cumulative duration
// histogram the rollups keep, column duration_le_<bound>: the number of
// requests that took at most bound. Percentiles are read from it (to within
// one bucket, interpolated). Counters merge far faster than quantile
// sketches: over 30 days a t-digest state per row made a services query
// take 300 ms, these columns a few.
var durationBounds = [...]int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000}

// DurationBounds are the bounds of the rollups' duration histogram, in
// ascending order.
func DurationBounds() []int { return slices.Clone(durationBounds[:]) }

// MinServerVersion is the oldest ClickHouse the schema runs on. The DDL
// renders the same for every server from it on: no statement depends on
// the version. The branches that once did (LowCardinality names from 19.3,
// TTL from 19.6, Delta/ZSTD codecs from 19.10) were never needed (the
// partition drops of DropExpired keep the retention on every version,
// the rest only saved disk) and never ran on a server here, which runs
// 18.16; TestClickHouseSchemaIsTheSameOnEveryVersion holds it so.
const MinServerVersion = "18.16"

// CheckServerVersion refuses a server older than MinServerVersion
// (version as version() gives it: "18.16.1", "24.8.4.13").
func CheckServerVersion(version string) error {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return fmt.Errorf("clickhouse version %q: want major.minor", version)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("clickhouse version %q: want major.minor", version)
	}
	if major < 18 || (major == 18 && minor < 16) {
		return fmt.Errorf("clickhouse version %s: the request-log schema needs %s or later", version, MinServerVersion)
	}
	return nil
}

//go:embed schema/*.sql schema/clickhouse/*.sql.tmpl
var schemaFS embed.FS

// stmt is the data of one statement template in
// schema/clickhouse/statements.sql.tmpl.
type stmt struct {
	Bounds []int
	// Name is the table the statement creates or fills; a rollup's view is
	// Name + "_mv".
	Name string
	// Source is the table a view or fill reads, Seconds its bucket size.
	Source  string
	Seconds int
	// PartitionBy is the table's partition key, Granularity its
	// index_granularity (0: the server's default, 8192).
	PartitionBy string
	Granularity int
	// ReportedBy: the raw table has the reported_by column. Every set is
	// made with it, except by migration 00001, to which 00003 adds it.
	ReportedBy bool
	// View is the materialized view feeding a rollup.
	View string
	// Cluster mode (Cluster set): Name, View and Source are qualified
	// with Database, Name is the replicated table <Local> and Dist the
	// Distributed table over it.
	Cluster, Database, Local, Dist string
}

// schemaData is the data of a migration file template.
type schemaData struct {
	Raw     stmt
	Rollups []stmt
}

// Partition keys, all in UTC whatever the server's zone. A read of a
// rollup costs about its columns times the parts it opens, so the hour and
// day rollups, which long windows read, are partitioned by week (weeks
// from Monday): a 720-hour window opens five or six parts of the day rollup
// instead of thirty, about as fast as months (docs/benchmarks.md), and
// retention, which drops whole partitions, keeps their rows at most a week
// past the cutoff instead of a month. The raw table and the minute rollup,
// which hold nearly all the rows and are read over hours, keep UTC days.
const (
	dayPartition  = "toYYYYMMDD(%s, 'UTC')"
	weekPartition = "toMonday(%s, 'UTC')"
)

// rollupGranularity is the rollups' index_granularity. A window reads
// a contiguous range of buckets of each rollup, its ragged edges an hour of
// minutes at most: with granules of 1024 rows it reads 13,000 rows where
// 8192 read 34,000 (a 720-hour window of 100 methods).
const rollupGranularity = 1024

func plan(t Tables) schemaData {
	base := stmt{Bounds: DurationBounds()}
	d := schemaData{Raw: base}
	d.Raw.Name, d.Raw.ReportedBy = t.Raw, true
	d.Raw.PartitionBy = fmt.Sprintf(dayPartition, "created_at")
	for _, r := range []struct {
		name      string
		seconds   int
		partition string
	}{{t.Minute, rollupSeconds[0], dayPartition}, {t.Hour, rollupSeconds[1], weekPartition}, {t.Day, rollupSeconds[2], weekPartition}} {
		s := base
		s.Name, s.Source, s.Seconds, s.View = r.name, t.Raw, r.seconds, r.name+"_mv"
		s.PartitionBy, s.Granularity = fmt.Sprintf(r.partition, "bucket"), rollupGranularity
		d.Rollups = append(d.Rollups, s)
	}
	return d
}

func templates() (*template.Template, error) {
	tpl, err := template.ParseFS(schemaFS, "schema/clickhouse/*.sql.tmpl")
	if err != nil {
		return nil, fmt.Errorf("request-log schema templates: %w", err)
	}
	return tpl, nil
}

type renderer struct {
	tpl *template.Template
	out []string
	err error
}

func (r *renderer) add(name string, data any) {
	if r.err != nil {
		return
	}
	var b strings.Builder
	if r.err = r.tpl.ExecuteTemplate(&b, name, data); r.err != nil {
		r.err = fmt.Errorf("request-log schema %s: %w", name, r.err)
		return
	}
	r.out = append(r.out, b.String())
}

func render(fill func(*renderer)) ([]string, error) {
	tpl, err := templates()
	if err != nil {
		return nil, err
	}
	r := &renderer{tpl: tpl}
	fill(r)
	return r.out, r.err
}

// DDL returns the statements that create the tables and views of set t,
// each idempotent: the statements of the ClickHouse migration, for any set
// of names.
func DDL(t Tables) ([]string, error) {
	d := plan(t)
	return render(func(r *renderer) {
		r.add("create_raw", d.Raw)
		for _, s := range d.Rollups {
			r.add("create_rollup_offsets", s)
			r.add("create_view_offsets", s)
		}
	})
}

// TableDDL is DDL without the materialized views: the tables of set t.
func TableDDL(t Tables) ([]string, error) {
	d := plan(t)
	return render(func(r *renderer) {
		r.add("create_raw", d.Raw)
		for _, s := range d.Rollups {
			r.add("create_rollup_offsets", s)
		}
	})
}

// ViewDDL is DDL's materialized views of set t alone.
func ViewDDL(t Tables) ([]string, error) {
	d := plan(t)
	return render(func(r *renderer) {
		for _, s := range d.Rollups {
			r.add("create_view_offsets", s)
		}
	})
}

// Fill is how a replay fills the rollups of a set from the rows its raw
// table holds, after its bulk load.
type Fill struct {
	// Minutes fill the minute rollup from the raw rows, one statement per
	// time range: they may run at once (each range's buckets are whole
	// minutes, and a bucket split between two would still merge right).
	Minutes []string
	// Coarser fill the hours from the minutes, then the days from the
	// hours, in this order, once every Minutes statement is done.
	Coarser []string
}

// RollupFill returns the statements that fill the rollups of t from the
// rows t.Raw holds: minutes from the raw rows, in the time ranges edges
// (unix seconds) bound ([edges[i], edges[i+1]) each; fewer than two edges:
// one pass over the whole table), hours from the minutes, days from the
// hours. A replay runs them once after its bulk load and only then creates
// the views: cheaper than the views folding every insert block into all
// three rollups.
func RollupFill(t Tables, edges ...int64) (Fill, error) {
	d := plan(t)
	minute, hour, day := d.Rollups[0], d.Rollups[1], d.Rollups[2]
	hour.Source, day.Source = t.Minute, t.Hour
	var f Fill
	ranges := []stmt{minute}
	if len(edges) >= 2 {
		ranges = ranges[:0]
		for i := 1; i < len(edges); i++ {
			s := minute
			// A subquery, as in RollupRefill.
			s.Source = fmt.Sprintf("(SELECT * FROM %s WHERE created_at >= toDateTime(%d) AND created_at < toDateTime(%d))", t.Raw, edges[i-1], edges[i])
			ranges = append(ranges, s)
		}
	}
	var err error
	if f.Minutes, err = render(func(r *renderer) {
		for _, s := range ranges {
			r.add("fill_from_raw_offsets", s)
		}
	}); err != nil {
		return Fill{}, err
	}
	if f.Coarser, err = render(func(r *renderer) {
		r.add("fill_from_rollup_offsets", hour)
		r.add("fill_from_rollup_offsets", day)
	}); err != nil {
		return Fill{}, err
	}
	return f, nil
}

// RollupRefill returns the statement that inserts into rollup (one of
// t.Rollups()) the aggregates of the rows of t.Raw of Kafka partition
// partition at offsets from to to: the sink's repair of a rollup that
// missed an insert into the raw table.
func RollupRefill(t Tables, rollup string, partition int32, from, to int64) (string, error) {
	d := plan(t)
	for _, s := range d.Rollups {
		if s.Name == rollup {
			// A subquery: in the aggregating SELECT kafka_offset names the
			// state the view needs under that name, not the column.
			s.Source = fmt.Sprintf("(SELECT * FROM %s WHERE kafka_partition = %d AND kafka_offset BETWEEN %d AND %d)", t.Raw, partition, from, to)
			out, err := render(func(r *renderer) { r.add("fill_from_raw_offsets", s) })
			if err != nil {
				return "", err
			}
			return out[0], nil
		}
	}
	return "", fmt.Errorf("request-log schema: %s is not a rollup of %v", rollup, t)
}

// CreateTables creates the tables and views of set t in conn's database
// if they are missing. The live set is created by the ClickHouse migration
// (ClickHouseSchema); this is for the sets a replay builds beside it, and
// for putting the live set back.
func CreateTables(ctx context.Context, conn driver.Conn, t Tables) error {
	stmts, err := DDL(t)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("clickhouse request-log schema: %w", err)
		}
	}
	return nil
}

// PostgresSchema are the Postgres migrations of the tables this package
// owns, for deploy/migrate.
func PostgresSchema() (fs.FS, error) {
	return fs.Sub(schemaFS, "schema")
}

// Cluster names the ClickHouse cluster the request-log tables span
// (CLICKHOUSE__CLUSTER) and the database they live in. The zero Cluster is
// one server.
type Cluster struct{ Name, Database string }

// On reports whether c is a cluster, not one server.
func (c Cluster) On() bool { return c.Name != "" }

// Validate checks that both names are plain identifiers: they are written
// into DDL and ZooKeeper paths unquoted.
func (c Cluster) Validate() error {
	if !c.On() {
		return nil
	}
	for _, n := range []struct{ what, v string }{{"cluster", c.Name}, {"database", c.Database}} {
		if !plainIdent(n.v) {
			return fmt.Errorf("clickhouse %s %q: want letters, digits and _ in cluster mode", n.what, n.v)
		}
	}
	return nil
}

// CaughtUpReads are the settings of a read on a cluster that trusts only
// replicas less than a second behind, with no fallback to a staler one: a
// shard without such a replica fails the read rather than answer short
// (docs/scaling.md, "When a ClickHouse replica returns"). Numbers: 18.16
// takes no string setting from this driver.
func CaughtUpReads() clickhouse.Settings {
	return clickhouse.Settings{"max_replica_delay_for_distributed_queries": 1, "fallback_to_stale_replicas_for_distributed_queries": 0}
}

// ValidClusterName checks a cluster name (CLICKHOUSE__CLUSTER): empty or
// a plain identifier.
func ValidClusterName(name string) error {
	if name == "" || plainIdent(name) {
		return nil
	}
	return fmt.Errorf("clickhouse cluster %q: want letters, digits and _", name)
}

func plainIdent(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r != '_' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return false
		}
	}
	return true
}

// LocalSuffix names the replicated table under each Distributed table of a
// cluster: requestlog_raw_local under requestlog_raw.
const LocalSuffix = "_local"

// clusterPlan is plan for set t of cluster c (the live set for the
// migration, a replay's beside it).
func clusterPlan(t Tables, c Cluster) schemaData {
	d := plan(t)
	qualify := func(s *stmt) {
		s.Cluster, s.Database = c.Name, c.Database
		s.Local = s.Name + LocalSuffix
		s.Dist = c.Database + "." + s.Name
		if s.View != "" {
			s.View = c.Database + "." + s.View
		}
		s.Name = c.Database + "." + s.Local
		s.Source = c.Database + "." + t.Raw + LocalSuffix
	}
	qualify(&d.Raw)
	for i := range d.Rollups {
		qualify(&d.Rollups[i])
	}
	return d
}

// ClickHouseSchema are the ClickHouse migrations of the live request-log
// tables for a server of the given version (refused before
// MinServerVersion; the same for every later one), rendered from
// schema/clickhouse/NNNNN_*.sql.tmpl, for deploy/migrate. On a cluster
// (c.On()), migration 00001 creates the whole schema ON CLUSTER
// (cluster.sql.tmpl) and the later ones are empty: a cluster starts from
// the current schema.
func ClickHouseSchema(version string, c ...Cluster) (fs.FS, error) {
	if err := CheckServerVersion(version); err != nil {
		return nil, err
	}
	tpl, err := templates()
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(schemaFS, "schema/clickhouse/[0-9]*_*.sql.tmpl")
	if err != nil {
		return nil, err
	}
	out := fstest.MapFS{}
	if len(c) > 0 && c[0].On() {
		if err := c[0].Validate(); err != nil {
			return nil, err
		}
		d := clusterPlan(LiveTables(), c[0])
		for i, name := range names {
			tname := "cluster_empty"
			if i == 0 {
				tname = "cluster_00001"
			}
			var b bytes.Buffer
			if err := tpl.ExecuteTemplate(&b, tname, d); err != nil {
				return nil, fmt.Errorf("request-log schema %s: %w", name, err)
			}
			out[strings.TrimSuffix(path.Base(name), ".tmpl")] = &fstest.MapFile{Data: b.Bytes(), Mode: 0o444}
		}
		return out, nil
	}
	// The migrations build the schema step by step: 00001 creates the
	// raw table as it first was, 00003 adds reported_by.
	d := plan(LiveTables())
	d.Raw.ReportedBy = false
	for _, name := range names {
		var b bytes.Buffer
		if err := tpl.ExecuteTemplate(&b, path.Base(name), d); err != nil {
			return nil, fmt.Errorf("request-log schema %s: %w", name, err)
		}
		out[strings.TrimSuffix(path.Base(name), ".tmpl")] = &fstest.MapFile{Data: b.Bytes(), Mode: 0o444}
	}
	return out, nil
}

// DropExpired drops every partition of the tables of set t that holds
// nothing newer than the retention cutoff (retentionDays before now, an
// instant), and returns how many it dropped. Partitions are UTC days
// (toYYYYMMDD(t, 'UTC')), UTC weeks in the hour and day rollups, in tables
// created since; older tables keep the server's zone or daily rollups until
// a replay rebuilds them. They are judged by the newest time their parts
// hold, not by their names, so the cutoff is the same instant whatever that
// zone or length, and no row or bucket inside the retention window is
// dropped: a week's rollup rows stay until its last day has passed the
// cutoff. A rollup bucket counts up to its end.
func DropExpired(ctx context.Context, conn driver.Conn, t Tables, retentionDays int, now time.Time) (int, error) {
	return dropExpiredParts(ctx, conn, t, "", retentionDays, now)
}

// Dialer opens a connection to one ClickHouse server (host:port) of a
// cluster, with the credentials and database of the sink's own.
type Dialer func(ctx context.Context, addr string) (driver.Conn, error)

// DropExpiredOn is DropExpired of set t (its Distributed tables' names)
// on cluster c (one server when c is zero), shard by shard: on the first
// replica of each shard that dial reaches, the expired partitions of its
// replicated tables are listed and dropped, and
// replication carries each drop to the shard's other replicas (one that is
// down drops when it comes back). Not ON CLUSTER: a distributed DDL waits
// for every host, and on 18.16 a host killed while it ran one can leave
// the queue stuck for minutes, which stalled retention. A shard none of
// whose replicas answers is reported and the others are still dropped.
func DropExpiredOn(ctx context.Context, conn driver.Conn, t Tables, c Cluster, dial Dialer, retentionDays int, now time.Time) (int, error) {
	if !c.On() {
		return DropExpired(ctx, conn, t, retentionDays, now)
	}
	if err := c.Validate(); err != nil {
		return 0, err
	}
	if dial == nil {
		return 0, errors.New("request-log retention on a cluster: no way to reach each shard (Dialer)")
	}
	shards, err := clusterShards(ctx, conn, c.Name)
	if err != nil {
		return 0, err
	}
	t = t.Suffixed(LocalSuffix)
	dropped := 0
	var errs []error
	for _, sh := range shards {
		n, err := dropOnShard(ctx, sh, c.Database, t, dial, retentionDays, now)
		dropped += n
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", sh.num, err))
		}
	}
	return dropped, errors.Join(errs...)
}

// ClusterServers lists the address (host:port) of every server of
// cluster, shard by shard, as system.clusters of conn's server gives
// them.
func ClusterServers(ctx context.Context, conn driver.Conn, cluster string) ([]string, error) {
	shards, err := clusterShards(ctx, conn, cluster)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sh := range shards {
		out = append(out, sh.addrs...)
	}
	return out, nil
}

type shard struct {
	num   uint32
	addrs []string
}

// clusterShards lists cluster's shards with their replicas' addresses in
// the cluster's order (system.clusters: what every Distributed table uses).
func clusterShards(ctx context.Context, conn driver.Conn, cluster string) ([]shard, error) {
	rows, err := conn.Query(ctx, `SELECT shard_num, host_address, port FROM system.clusters
		WHERE cluster = ? ORDER BY shard_num, replica_num`, cluster)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cluster, err)
	}
	defer rows.Close()
	var out []shard
	for rows.Next() {
		var (
			num  uint32
			host string
			port uint16
		)
		if err := rows.Scan(&num, &host, &port); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", cluster, err)
		}
		if len(out) == 0 || out[len(out)-1].num != num {
			out = append(out, shard{num: num})
		}
		out[len(out)-1].addrs = append(out[len(out)-1].addrs, net.JoinHostPort(host, strconv.Itoa(int(port))))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cluster, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cluster %s: not in system.clusters of this server", cluster)
	}
	return out, nil
}

// dropOnShard drops the expired partitions of t on the first replica of sh
// that answers.
func dropOnShard(ctx context.Context, sh shard, database string, t Tables, dial Dialer, retentionDays int, now time.Time) (int, error) {
	var errs []error
	for _, addr := range sh.addrs {
		conn, err := dial(ctx, addr)
		if err == nil {
			err = conn.Ping(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			if conn != nil {
				_ = conn.Close()
			}
			continue
		}
		n, err := dropExpiredParts(ctx, conn, t, database+".", retentionDays, now)
		_ = conn.Close()
		if err != nil {
			return n, fmt.Errorf("%s: %w", addr, err)
		}
		return n, nil
	}
	return 0, errors.Join(errs...)
}

// dropExpiredParts drops the expired partitions of t on conn's server;
// qualify prefixes the table names (a database and a dot, or nothing for
// the connection's own database).
func dropExpiredParts(ctx context.Context, conn driver.Conn, t Tables, qualify string, retentionDays int, now time.Time) (int, error) {
	// Days of UTC: a local calendar would move the cutoff by an hour
	// across a daylight-saving change.
	cutoff := now.UTC().AddDate(0, 0, -retentionDays).Unix()
	q := expiredPartitions
	args := []any{t.Raw, t.Minute, t.Hour, t.Day, t.Raw, t.Minute, t.Hour, cutoff}
	if qualify != "" {
		q = strings.Replace(q, "WHERE database = currentDatabase()", "WHERE database = ?", 1)
		args = append([]any{strings.TrimSuffix(qualify, ".")}, args...)
	}
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("list request-log partitions: %w", err)
	}
	type part struct{ table, id string }
	var parts []part
	for rows.Next() {
		var p part
		if err := rows.Scan(&p.table, &p.id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("list request-log partitions: %w", err)
		}
		parts = append(parts, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("list request-log partitions: %w", err)
	}
	for i, p := range parts {
		// partition_id is eight digits (a day or a week's Monday) from
		// system.parts, never user input; the database passed Validate.
		if err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s%s DROP PARTITION ID '%s'", qualify, p.table, p.id)); err != nil {
			return i, fmt.Errorf("drop partition %s of %s: %w", p.id, p.table, err)
		}
	}
	return len(parts), nil
}

// expiredPartitions: max_time is the newest value of the partition key's
// time column in a part, a row's time or a bucket's start.
const expiredPartitions = `SELECT table, partition_id FROM system.parts
WHERE database = currentDatabase() AND active AND table IN (?, ?, ?, ?)
GROUP BY table, partition_id
HAVING max(toUInt32(max_time)) + multiIf(table = ?, 1, table = ?, 60, table = ?, 3600, 86400) <= ?`
