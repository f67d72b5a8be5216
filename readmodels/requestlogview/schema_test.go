package requestlogview_test

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/migrate"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// The ClickHouse migrations render the same for every server version
// from MinServerVersion on, alone and on a cluster: the tests here run on
// 18.16 and the compose file runs 24.8, so no statement may depend on the
// version (the LowCardinality, codec and TTL branches the schema once had
// never ran on a server here). Older servers are refused.
func TestClickHouseSchemaIsTheSameOnEveryVersion(t *testing.T) {
	render := func(version string, c ...requestlogview.Cluster) map[string]string {
		t.Helper()
		fsys, err := requestlogview.ClickHouseSchema(version, c...)
		if err != nil {
			t.Fatalf("%s: %v", version, err)
		}
		names, _ := fs.Glob(fsys, "*.sql")
		out := map[string]string{}
		for _, name := range names {
			b, err := fs.ReadFile(fsys, name)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = string(b)
		}
		return out
	}
	for _, c := range [][]requestlogview.Cluster{nil, {{Name: "cfgd", Database: "logs"}}} {
		tested := render("18.16.1", c...)
		if len(tested) != 3 {
			t.Fatalf("%d migrations", len(tested))
		}
		for _, v := range []string{"18.16", "19.3.4", "19.6.1", "19.10.1.5", "24.3.2.23", "24.8.4.13", "25.3.1.1"} {
			for name, sql := range render(v, c...) {
				if sql != tested[name] {
					t.Errorf("%s renders for %s other than for 18.16 (cluster %v):\n%s\nagainst\n%s", name, v, c, sql, tested[name])
				}
			}
		}
		for name, sql := range tested {
			for _, branch := range []string{"LowCardinality", "CODEC", "TTL"} {
				if strings.Contains(sql, branch) {
					t.Errorf("%s uses %s", name, branch)
				}
			}
		}
	}
	for _, v := range []string{"", "x.y", "18.14.17", "1.1.54394"} {
		if _, err := requestlogview.ClickHouseSchema(v); err == nil {
			t.Errorf("version %q accepted", v)
		}
	}
}

// The migrations build the schema step by step; each creates and drops
// what it should.
func TestClickHouseSchemaMigrations(t *testing.T) {
	fsys, err := requestlogview.ClickHouseSchema(requestlogview.MinServerVersion)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := fs.Glob(fsys, "*.sql")
	if strings.Join(names, " ") != "00001_requestlog.sql 00003_reported_by.sql 00004_requestlog_offsets.sql" {
		t.Fatalf("migrations %v", names)
	}
	first, err := fs.ReadFile(fsys, names[0])
	if err != nil {
		t.Fatal(err)
	}
	// 00001 creates the raw table as it first was: 18.16 cannot add
	// a column only if missing, so 00003 must find it missing.
	if strings.Contains(string(first), "reported_by") {
		t.Error("00001 creates reported_by")
	}
	if b, err := fs.ReadFile(fsys, names[1]); err != nil || !strings.Contains(string(b), "ALTER TABLE requestlog_raw ADD COLUMN reported_by String DEFAULT '';") {
		t.Errorf("00003: %s %v", b, err)
	}
	var sql string
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		sql += string(b)
	}
	for _, s := range []string{"service_name String,", "duration_ms UInt32,"} {
		if !strings.Contains(sql, s) {
			t.Errorf("lacks %q", s)
		}
	}
	for _, s := range append(requestlogview.LiveTables().All(), requestlogview.LiveTables().Views()...) {
		if !strings.Contains(sql, "CREATE TABLE IF NOT EXISTS "+s+" (") && !strings.Contains(sql, "VIEW IF NOT EXISTS "+s+" TO") {
			t.Errorf("does not create %s", s)
		}
		if !strings.Contains(sql, "DROP TABLE IF EXISTS "+s+";") {
			t.Errorf("down does not drop %s", s)
		}
	}
}

// Every statement names only the tables of the set it is given: a replay's
// shadow set never touches the live tables.
func TestDDLNamesItsSet(t *testing.T) {
	shadow := requestlogview.LiveTables().Suffixed("__shadow")
	all := func(s []string, err error) string {
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(s, "\n")
	}
	fill := func(f requestlogview.Fill, err error) string {
		return all(append(f.Minutes, f.Coarser...), err)
	}
	for name, got := range map[string]string{
		"DDL":                  all(requestlogview.DDL(shadow)),
		"TableDDL":             all(requestlogview.TableDDL(shadow)),
		"ViewDDL":              all(requestlogview.ViewDDL(shadow)),
		"RollupFill":           fill(requestlogview.RollupFill(shadow)),
		"RollupFill in ranges": fill(requestlogview.RollupFill(shadow, 0, 60, 120)),
	} {
		for _, w := range strings.FieldsFunc(got, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == '(' || r == ')' || r == ',' }) {
			if strings.HasPrefix(w, "requestlog_") && !strings.Contains(w, "__shadow") {
				t.Errorf("%s names the live %s", name, w)
			}
		}
	}
	if tables := all(requestlogview.TableDDL(shadow)); strings.Contains(tables, "MATERIALIZED VIEW") {
		t.Error("TableDDL creates views")
	}
	if views := all(requestlogview.ViewDDL(shadow)); strings.Count(views, "CREATE MATERIALIZED VIEW") != 3 || strings.Contains(views, "CREATE TABLE") {
		t.Errorf("ViewDDL:\n%s", views)
	}
}

// The live tables come from the goose migration on the server here; the
// retention drop works on them, and the migration adopts tables that
// CreateTables (or the code before goose) made.
func TestClickHouseSchemaAndRetention(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts, conn := testenv.ClickHouse(t)
	db := clickhouse.OpenDB(opts)
	defer db.Close()
	// Half made before goose ran: the migration completes it.
	stmts, err := requestlogview.DDL(requestlogview.LiveTables())
	if err != nil {
		t.Fatal(err)
	}
	// The raw table as the code before migration 00003 made it.
	before := strings.Replace(stmts[0], ",\n\treported_by String DEFAULT ''", "", 1)
	if before == stmts[0] {
		t.Fatalf("the raw table lacks reported_by:\n%s", stmts[0])
	}
	if err := conn.Exec(ctx, before); err != nil {
		t.Fatal(err)
	}
	schema, err := requestlogview.ClickHouseSchema(serverVersion(t, conn))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	for range 2 {
		if err := migrate.ClickHouse(ctx, db, quiet, migrate.Schema{Owner: "readmodels/requestlogview", FS: schema}); err != nil {
			t.Fatal(err)
		}
	}
	if err := requestlogview.CreateTables(ctx, conn, requestlogview.LiveTables()); err != nil { // idempotent beside it
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	// 18.16 takes inserts only as native data blocks, with the columns named.
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+requestlogview.RawTable+" (id, created_at, service_name, method_name, status, duration_ms)")
	if err != nil {
		t.Fatal(err)
	}
	// Inside the window: now (Monday 23 November) and 29 days ago (Sunday
	// 25 October); older than the cutoff: Friday 23 October (the same week
	// as the 25th), Wednesday 14 October and Monday 14 September.
	for _, at := range []time.Time{now, now.AddDate(0, 0, -29), now.AddDate(0, 0, -31), now.AddDate(0, 0, -40), now.AddDate(0, 0, -70)} {
		if err := b.Append(uint64(at.Unix()), at, "s", "m", "success", uint32(1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	n, err := requestlogview.DropExpired(ctx, conn, requestlogview.LiveTables(), 30, now)
	if err != nil {
		t.Fatal(err)
	}
	// The raw table and the minute rollup drop each old day. The hour and
	// day rollups are partitioned by week: they drop the weeks of 14
	// October and 14 September, and keep the week of 19 October, which
	// holds a bucket inside the window, with the 23rd.
	if n != 10 {
		t.Fatalf("dropped %d partitions, want 10 (3 days of raw and minute rows, 2 weeks of hours and days)", n)
	}
	left := map[string]uint64{
		requestlogview.RawTable: 2, requestlogview.MinuteTable: 2,
		requestlogview.HourTable: 3, requestlogview.DayTable: 3,
	}
	for table, want := range left {
		var rows uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != want {
			t.Errorf("%s holds %d rows after retention, want %d", table, rows, want)
		}
	}
	// What the rollups keep beyond the retention stays outside the
	// statistics' window.
	o, err := requestlogview.New(conn, func() time.Time { return now }, nil).Overview(ctx, 30*24)
	if err != nil {
		t.Fatal(err)
	}
	if o.TotalRequests != 2 {
		t.Errorf("overview over the retention counts %d requests, want the 2 inside it", o.TotalRequests)
	}
	// Down drops the column, then every table and view; up brings them back.
	p, err := migrate.NewClickHouseProvider(db, migrate.Schema{Owner: "readmodels/requestlogview", FS: schema})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := p.Down(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var cols uint64
	if err := db.QueryRowContext(ctx, "SELECT count() FROM system.columns WHERE database = currentDatabase() AND table = 'requestlog_raw' AND name = 'reported_by'").Scan(&cols); err != nil || cols != 0 {
		t.Fatalf("reported_by after one down: %d, %v", cols, err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatal(err)
	}
	var tables uint64
	if err := db.QueryRowContext(ctx, "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name LIKE 'requestlog%'").Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("%d request-log tables after down, %v", tables, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name LIKE 'requestlog%'").Scan(&tables); err != nil || tables != 7 {
		t.Fatalf("%d request-log tables after up, %v", tables, err)
	}
}

// Rows written under migration 00001 keep their counts through 00004, and
// every rollup records the raw table's highest offset per partition, so
// the sink refills nothing after the upgrade.
func TestOffsetsMigrationKeepsData(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts, conn := testenv.ClickHouse(t)
	db := clickhouse.OpenDB(opts)
	defer db.Close()
	schema, err := requestlogview.ClickHouseSchema(serverVersion(t, conn))
	if err != nil {
		t.Fatal(err)
	}
	p, err := migrate.NewClickHouseProvider(db, migrate.Schema{Owner: "readmodels/requestlogview", FS: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+requestlogview.RawTable+" (id, kafka_partition, kafka_offset, created_at, service_name, method_name, status, duration_ms)")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.Now().Location())
	for i := range 40 {
		part, off := uint16(i%2), uint64(10+i/2)
		if err := b.Append(uint64(part)<<52|off<<12, part, off, at.Add(time.Duration(i)*time.Minute), "s", fmt.Sprint("m", i%3), "success", uint32(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	for _, rollup := range requestlogview.LiveTables().Rollups() {
		var n, sum uint64
		var services uint64
		if err := conn.QueryRow(ctx, "SELECT countMerge(requests), sumMerge(duration_sum), uniqExact(method_name) FROM "+rollup).Scan(&n, &sum, &services); err != nil {
			t.Fatal(err)
		}
		if n != 40 || sum != 780 || services != 3 {
			t.Errorf("%s: %d requests, duration sum %d, %d methods; want 40, 780, 3", rollup, n, sum, services)
		}
		var got []string
		rs, err := conn.Query(ctx, "SELECT kafka_partition, maxMerge(kafka_offset) FROM "+rollup+" GROUP BY kafka_partition ORDER BY kafka_partition")
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var part uint16
			var off uint64
			if err := rs.Scan(&part, &off); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprint(part, ":", off))
		}
		rs.Close()
		if strings.Join(got, " ") != "0:29 1:29" {
			t.Errorf("%s records offsets %v, want 0:29 1:29", rollup, got)
		}
	}
}

// The retention cutoff is an instant, whatever time zone the partitions
// are days of (the server's, or a column's own, as here): nothing newer
// than it is dropped, and whole days older than it are.
func TestDropExpiredWhateverTheZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := testenv.ClickHouse(t)
	now := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC).In(time.FixedZone("UTC+5", 5*3600))
	cutoff := now.AddDate(0, 0, -30).UTC()
	rows := []time.Time{
		cutoff.Add(2 * time.Hour),       // inside the window, late on a day west of UTC
		cutoff.Add(-time.Hour),          // outside, in the same partition west of UTC
		cutoff.Add(-4 * 24 * time.Hour), // outside, days before
		now.UTC(),
	}
	for i, zone := range []string{"UTC", "America/Los_Angeles", "Asia/Tokyo"} {
		t.Run(zone, func(t *testing.T) {
			set := requestlogview.LiveTables().Suffixed(fmt.Sprint("_z", i))
			stmts, err := requestlogview.DDL(set)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stmts {
				s = strings.ReplaceAll(s, "created_at DateTime,", "created_at DateTime('"+zone+"'),")
				s = strings.ReplaceAll(s, "bucket DateTime,", "bucket DateTime('"+zone+"'),")
				if err := conn.Exec(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			b, err := conn.PrepareBatch(ctx, "INSERT INTO "+set.Raw+" (id, created_at, service_name, method_name, status, duration_ms)")
			if err != nil {
				t.Fatal(err)
			}
			for k, at := range rows {
				if err := b.Append(uint64(k), at, "s", "m", "success", uint32(1)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Send(); err != nil {
				t.Fatal(err)
			}
			if _, err := requestlogview.DropExpired(ctx, conn, set, 30, now); err != nil {
				t.Fatal(err)
			}
			var inside, oldest uint64
			if err := conn.QueryRow(ctx, "SELECT countIf(created_at >= ?), countIf(created_at < ?) FROM "+set.Raw,
				cutoff, cutoff.Add(-3*24*time.Hour)).Scan(&inside, &oldest); err != nil {
				t.Fatal(err)
			}
			if inside != 2 || oldest != 0 {
				t.Errorf("raw: %d rows inside the window (want 2), %d days old (want 0)", inside, oldest)
			}
			for _, rollup := range set.Rollups() {
				var n uint64
				if err := conn.QueryRow(ctx, "SELECT countMerge(requests) FROM "+rollup+" WHERE bucket >= ?",
					cutoff.Truncate(24*time.Hour)).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n < 2 {
					t.Errorf("%s lost requests inside the window: %d left", rollup, n)
				}
			}
		})
	}
}

// The cutoff is retention days of 24 hours before now, whatever zone now
// is given in: across a daylight-saving change a local calendar would
// move it by an hour, here dropping a row inside the window.
func TestDropExpiredCountsUTCDays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := testenv.ClickHouse(t)
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Skip(err)
	}
	set := requestlogview.LiveTables()
	stmts, err := requestlogview.DDL(set)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if err := conn.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 3, 20, 3, 0, 0, 0, time.UTC)
	inside := now.Add(-30*24*time.Hour + 30*time.Minute) // alone in its day
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+set.Raw+" (id, created_at, service_name, method_name, status, duration_ms)")
	if err != nil {
		t.Fatal(err)
	}
	for k, at := range []time.Time{inside, now} {
		if err := b.Append(uint64(k), at, "s", "m", "success", uint32(1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	if _, err := requestlogview.DropExpired(ctx, conn, set, 30, now.In(la)); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+set.Raw).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d rows left, want both (one is inside the window by half an hour)", n)
	}
}

// On a cluster, migration 00001 creates the whole schema ON CLUSTER: the
// replicated local tables, the Distributed tables under the usual names
// sharded by Kafka partition, the views on the local tables, every name
// qualified (the other servers run it in database default); 00003 and
// 00004 are empty. Names that would not be plain identifiers are refused.
func TestClickHouseSchemaOnACluster(t *testing.T) {
	fsys, err := requestlogview.ClickHouseSchema(requestlogview.MinServerVersion, requestlogview.Cluster{Name: "cfgd", Database: "logs"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(fsys, "00001_requestlog.sql")
	if err != nil {
		t.Fatal(err)
	}
	up := strings.Split(string(b), "-- +goose Down")[0]
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS logs.requestlog_raw_local ON CLUSTER cfgd (",
		"ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/logs/requestlog_raw_local', '{replica}')",
		"CREATE TABLE IF NOT EXISTS logs.requestlog_raw ON CLUSTER cfgd AS logs.requestlog_raw_local\nENGINE = Distributed(cfgd, logs, requestlog_raw_local, kafka_partition)",
		"ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/logs/requestlog_hour_local', '{replica}')",
		"CREATE MATERIALIZED VIEW IF NOT EXISTS logs.requestlog_minute_mv ON CLUSTER cfgd TO logs.requestlog_minute_local AS",
		"FROM logs.requestlog_raw_local",
		"reported_by String DEFAULT ''",
		"kafka_offset AggregateFunction(max, UInt64)",
	} {
		if !strings.Contains(up, want) {
			t.Errorf("cluster migration lacks %q:\n%s", want, up)
		}
	}
	// The replicated tables are laid out as on one server.
	if d, w, g := strings.Count(up, "PARTITION BY toYYYYMMDD("), strings.Count(up, "PARTITION BY toMonday(bucket, 'UTC')"),
		strings.Count(up, "SETTINGS index_granularity = 1024"); d != 2 || w != 2 || g != 3 {
		t.Errorf("%d tables partitioned by day, %d by week, %d with granules of 1024; want 2 (raw, minute), 2 (hour, day), 3 (rollups)", d, w, g)
	}
	if n := strings.Count(up, "ON CLUSTER cfgd"); n != 11 {
		t.Errorf("%d statements ON CLUSTER, want 11 (4 local, 4 distributed, 3 views)", n)
	}
	for _, name := range []string{"00003_reported_by.sql", "00004_requestlog_offsets.sql"} {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "ALTER") || strings.Contains(string(b), "CREATE") {
			t.Errorf("%s on a cluster:\n%s", name, b)
		}
	}
	for _, c := range []requestlogview.Cluster{{Name: "cf-gd", Database: "logs"}, {Name: "cfgd", Database: "lo`gs"}, {Name: "cfgd"}} {
		if _, err := requestlogview.ClickHouseSchema(requestlogview.MinServerVersion, c); err == nil {
			t.Errorf("cluster %+v accepted", c)
		}
	}
}

// serverVersion is version() of conn's server.
func serverVersion(t *testing.T, conn driver.Conn) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(context.Background(), "SELECT version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
