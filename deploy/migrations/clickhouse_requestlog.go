package migrations

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Request-log tables in ClickHouse. The raw table holds one row per
// request; the rollups, fed by materialized views on every insert into the
// raw table, hold per-minute, per-hour and per-day aggregate states so statistics
// over long windows read thousands of rows, not millions.
const (
	RequestLogRaw    = "requestlog_raw"
	RequestLogMinute = "requestlog_minute"
	RequestLogHour   = "requestlog_hour"
	RequestLogDay    = "requestlog_day"
)

// RequestLogTables names one set of request-log tables: the live ones
// (LiveRequestLogTables) or a replay's shadow copies beside them
// (Suffixed). The rollups' materialized views are named after their
// rollup with an "_mv" suffix.
type RequestLogTables struct{ Raw, Minute, Hour, Day string }

// LiveRequestLogTables are the tables queries read and the sink writes.
func LiveRequestLogTables() RequestLogTables {
	return RequestLogTables{Raw: RequestLogRaw, Minute: RequestLogMinute, Hour: RequestLogHour, Day: RequestLogDay}
}

// Suffixed returns t with suffix appended to every name.
func (t RequestLogTables) Suffixed(suffix string) RequestLogTables {
	return RequestLogTables{Raw: t.Raw + suffix, Minute: t.Minute + suffix, Hour: t.Hour + suffix, Day: t.Day + suffix}
}

// All are the four tables, raw first.
func (t RequestLogTables) All() []string { return []string{t.Raw, t.Minute, t.Hour, t.Day} }

// Views are the materialized views feeding the rollups from the raw table.
func (t RequestLogTables) Views() []string {
	return []string{t.Minute + "_mv", t.Hour + "_mv", t.Day + "_mv"}
}

// RequestLogDurationBounds are the upper bounds (ms) of the cumulative
// duration histogram the rollups keep, column duration_le_<bound>: the
// number of requests that took at most bound. Percentiles are read from it
// (to within one bucket, interpolated). Counters merge far faster than
// quantile sketches: over 30 days a t-digest state per row made a services
// query take 300 ms, these columns a few.
var RequestLogDurationBounds = []int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000}

// ClickHouseFeatures are the optional server features the schema uses when
// the server has them. Everything else in the schema runs on 18.16.
type ClickHouseFeatures struct {
	// LowCardinality dictionary-encodes the repetitive name columns
	// (experimental behind a setting before 19.3).
	LowCardinality bool
	// Codecs adds Delta/ZSTD column codecs (19.10 and later).
	Codecs bool
	// TTL lets the server expire rows itself (19.6 and later), as a backstop
	// to the partition drops that work on every version.
	TTL bool
}

// FeaturesFor chooses the features by server version ("18.16.1",
// "24.3.2.23"). This is the one place the schema depends on the version.
func FeaturesFor(version string) (ClickHouseFeatures, error) {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return ClickHouseFeatures{}, fmt.Errorf("clickhouse version %q: want major.minor", version)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return ClickHouseFeatures{}, fmt.Errorf("clickhouse version %q: want major.minor", version)
	}
	atLeast := func(ma, mi int) bool { return major > ma || (major == ma && minor >= mi) }
	return ClickHouseFeatures{LowCardinality: atLeast(19, 3), Codecs: atLeast(19, 10), TTL: atLeast(19, 6)}, nil
}

// RequestLogDDL returns the statements that create the request-log schema,
// each idempotent, for a server with features f and the given retention.
func RequestLogDDL(f ClickHouseFeatures, retentionDays int) []string {
	return RequestLogDDLFor(LiveRequestLogTables(), f, retentionDays)
}

// RequestLogTableDDL is RequestLogDDL without the materialized views: the
// tables of set t.
func RequestLogTableDDL(t RequestLogTables, f ClickHouseFeatures, retentionDays int) []string {
	var out []string
	for _, s := range RequestLogDDLFor(t, f, retentionDays) {
		if !strings.HasPrefix(s, "CREATE MATERIALIZED VIEW") {
			out = append(out, s)
		}
	}
	return out
}

// RequestLogViewDDL is RequestLogDDL's materialized views of set t alone.
func RequestLogViewDDL(t RequestLogTables, f ClickHouseFeatures) []string {
	var out []string
	for _, s := range RequestLogDDLFor(t, f, 1) {
		if strings.HasPrefix(s, "CREATE MATERIALIZED VIEW") {
			out = append(out, s)
		}
	}
	return out
}

// RequestLogDDLFor is RequestLogDDL for the tables of set t, whose views
// read t.Raw and write t's rollups.
func RequestLogDDLFor(t RequestLogTables, f ClickHouseFeatures, retentionDays int) []string {
	name := "String"
	if f.LowCardinality {
		name = "LowCardinality(String)"
	}
	codec := func(c string) string {
		if f.Codecs {
			return " CODEC(" + c + ")"
		}
		return ""
	}
	ttl := func(col string) string {
		if f.TTL {
			return fmt.Sprintf(" TTL %s + INTERVAL %d DAY", col, retentionDays)
		}
		return ""
	}
	raw := `CREATE TABLE IF NOT EXISTS ` + t.Raw + ` (
	id UInt64` + codec("Delta, LZ4") + `,
	kafka_partition UInt16,
	kafka_offset UInt64` + codec("Delta, LZ4") + `,
	created_at DateTime` + codec("Delta, LZ4") + `,
	created_ms UInt16,
	request_id String,
	service_name ` + name + `,
	method_name ` + name + `,
	status ` + name + `,
	duration_ms UInt32,
	grpc_status_code ` + name + `,
	error_message String` + codec("ZSTD") + `,
	client_ip String,
	user_id UInt64,
	username String,
	is_authenticated UInt8,
	api_key_id UInt64,
	api_key_name String
) ENGINE = MergeTree
PARTITION BY toYYYYMMDD(created_at)
ORDER BY (created_at, id)` + ttl("created_at")
	rollup := func(table string, seconds int) []string {
		var hist strings.Builder
		for _, b := range RequestLogDurationBounds {
			fmt.Fprintf(&hist, ",\n\tduration_le_%d AggregateFunction(countIf, UInt8)", b)
		}
		create := `CREATE TABLE IF NOT EXISTS ` + table + ` (
	bucket DateTime,
	service_name ` + name + `,
	method_name ` + name + `,
	requests AggregateFunction(count),
	successes AggregateFunction(countIf, UInt8),
	errors AggregateFunction(countIf, UInt8),
	timeouts AggregateFunction(countIf, UInt8),
	cancellations AggregateFunction(countIf, UInt8),
	duration_sum AggregateFunction(sum, UInt32),
	duration_min AggregateFunction(min, UInt32),
	duration_max AggregateFunction(max, UInt32)` + hist.String() + `
) ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMMDD(bucket)
ORDER BY (bucket, service_name, method_name)` + ttl("bucket")
		view := `CREATE MATERIALIZED VIEW IF NOT EXISTS ` + table + `_mv TO ` + table + ` AS
` + rollupFromRaw(t.Raw, seconds)
		return []string{create, view}
	}
	out := []string{raw}
	out = append(out, rollup(t.Minute, 60)...)
	out = append(out, rollup(t.Hour, 3600)...)
	out = append(out, rollup(t.Day, 86400)...)
	if f.TTL {
		// A changed retention reaches tables created under the old one.
		for _, table := range t.All() {
			col := "bucket"
			if table == t.Raw {
				col = "created_at"
			}
			out = append(out, fmt.Sprintf("ALTER TABLE %s MODIFY%s", table, ttl(col)))
		}
	}
	return out
}

// bucketOf is the UTC bucket of seconds that column falls in.
func bucketOf(column string, seconds int) string {
	return fmt.Sprintf("toDateTime(intDiv(toUInt32(%s), %d) * %d)", column, seconds, seconds)
}

// rollupFromRaw is the SELECT of a rollup's materialized view: the
// aggregate states of raw's rows per bucket of seconds.
func rollupFromRaw(raw string, seconds int) string {
	var hist strings.Builder
	for _, b := range RequestLogDurationBounds {
		fmt.Fprintf(&hist, ",\n\tcountIfState(duration_ms <= %d) AS duration_le_%d", b, b)
	}
	// Buckets are whole UTC minutes, hours and days whatever the
	// server's time zone, so the read model can split a window exactly.
	return `SELECT ` + bucketOf("created_at", seconds) + ` AS bucket, service_name, method_name,
	countState() AS requests,
	countIfState(status = 'success') AS successes,
	countIfState(status = 'error') AS errors,
	countIfState(status = 'timeout') AS timeouts,
	countIfState(status = 'cancelled') AS cancellations,
	sumState(duration_ms) AS duration_sum,
	minState(duration_ms) AS duration_min,
	maxState(duration_ms) AS duration_max` + hist.String() + `
FROM ` + raw + `
GROUP BY bucket, service_name, method_name`
}

// rollupFromRollup re-aggregates a finer rollup's states into buckets of
// seconds: the same states the raw rows would give (counts, sums, minima
// and maxima merge exactly). The states are renamed (s_*) so that no
// alias shadows the column it merges.
func rollupFromRollup(finer string, seconds int) string {
	cols := []string{"requests", "successes", "errors", "timeouts", "cancellations", "duration_sum", "duration_min", "duration_max"}
	fns := []string{"count", "countIf", "countIf", "countIf", "countIf", "sum", "min", "max"}
	for _, b := range RequestLogDurationBounds {
		cols = append(cols, fmt.Sprintf("duration_le_%d", b))
		fns = append(fns, "countIf")
	}
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = fns[i] + "MergeState(" + c + ") AS s_" + c
	}
	return `SELECT ` + bucketOf("bucket", seconds) + ` AS b, service_name, method_name,
	` + strings.Join(sel, ",\n\t") + `
FROM ` + finer + `
GROUP BY b, service_name, method_name`
}

// RequestLogRollupFill returns the statements that fill the rollups of t
// from the rows t.Raw holds, in one pass each: minutes from the raw rows,
// hours from the minutes, days from the hours. A replay runs them once
// after its bulk load and only then creates the views: cheaper than the
// views folding every insert block into all three rollups.
func RequestLogRollupFill(t RequestLogTables) []string {
	return []string{
		"INSERT INTO " + t.Minute + " " + rollupFromRaw(t.Raw, 60),
		"INSERT INTO " + t.Hour + " " + rollupFromRollup(t.Minute, 3600),
		"INSERT INTO " + t.Day + " " + rollupFromRollup(t.Hour, 86400),
	}
}

// UpRequestLog creates the request-log schema in conn's database, choosing
// features by the server's version.
func UpRequestLog(ctx context.Context, conn driver.Conn, retentionDays int) error {
	return UpRequestLogTables(ctx, conn, LiveRequestLogTables(), retentionDays)
}

// UpRequestLogTables is UpRequestLog for the tables of set t.
func UpRequestLogTables(ctx context.Context, conn driver.Conn, t RequestLogTables, retentionDays int) error {
	f, err := ServerFeatures(ctx, conn)
	if err != nil {
		return err
	}
	for _, stmt := range RequestLogDDLFor(t, f, retentionDays) {
		if err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("clickhouse request-log schema: %w", err)
		}
	}
	return nil
}

// ServerFeatures are the features of conn's server (FeaturesFor its
// version).
func ServerFeatures(ctx context.Context, conn driver.Conn) (ClickHouseFeatures, error) {
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return ClickHouseFeatures{}, fmt.Errorf("clickhouse version: %w", err)
	}
	return FeaturesFor(version)
}

// DropExpiredRequestLogs drops every day partition of the request-log
// tables older than retentionDays before now, and returns how many it
// dropped. Partitions are named by toYYYYMMDD, so whole days go at once.
func DropExpiredRequestLogs(ctx context.Context, conn driver.Conn, retentionDays int, now time.Time) (int, error) {
	return DropExpiredRequestLogTables(ctx, conn, LiveRequestLogTables(), retentionDays, now)
}

// DropExpiredRequestLogTables is DropExpiredRequestLogs for the tables of
// set t.
func DropExpiredRequestLogTables(ctx context.Context, conn driver.Conn, t RequestLogTables, retentionDays int, now time.Time) (int, error) {
	cutoff := now.UTC().AddDate(0, 0, -retentionDays).Format("20060102")
	rows, err := conn.Query(ctx, `SELECT DISTINCT table, partition_id FROM system.parts
WHERE database = currentDatabase() AND active AND table IN (?, ?, ?, ?) AND partition_id < ?`,
		t.Raw, t.Minute, t.Hour, t.Day, cutoff)
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
		// partition_id is eight digits from system.parts, never user input.
		if err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DROP PARTITION ID '%s'", p.table, p.id)); err != nil {
			return i, fmt.Errorf("drop partition %s of %s: %w", p.id, p.table, err)
		}
	}
	return len(parts), nil
}
