package requestlogview_test

import (
	"context"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/migrate"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

func TestFeaturesFor(t *testing.T) {
	cases := []struct {
		version string
		want    requestlogview.Features
		bad     bool
	}{
		{version: "18.16.1"},
		{version: "19.3.4", want: requestlogview.Features{LowCardinality: true}},
		{version: "19.6.1", want: requestlogview.Features{LowCardinality: true, TTL: true}},
		{version: "19.10.1.5", want: requestlogview.Features{LowCardinality: true, TTL: true, Codecs: true}},
		{version: "24.3.2.23", want: requestlogview.Features{LowCardinality: true, TTL: true, Codecs: true}},
		{version: "", bad: true},
		{version: "x.y", bad: true},
	}
	for _, c := range cases {
		got, err := requestlogview.FeaturesFor(c.version)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("FeaturesFor(%q) = %+v, %v; want %+v, bad=%v", c.version, got, err, c.want, c.bad)
		}
	}
}

// The migration rendered for each server version uses exactly the modern
// features that version has.
func TestClickHouseSchemaFollowsVersion(t *testing.T) {
	cases := []struct {
		version    string
		want, lack []string
	}{
		{version: "18.16.1", want: []string{"service_name String,", "duration_ms UInt32,"},
			lack: []string{"LowCardinality", "CODEC", "TTL"}},
		{version: "19.3.4", want: []string{"service_name LowCardinality(String),"}, lack: []string{"CODEC", "TTL"}},
		{version: "19.6.1", want: []string{"ORDER BY (created_at, id) TTL created_at + INTERVAL 9 DAY;",
			"ALTER TABLE requestlog_day MODIFY TTL bucket + INTERVAL 9 DAY;"}, lack: []string{"CODEC"}},
		{version: "24.3.2.23", want: []string{"LowCardinality(String)", "id UInt64 CODEC(Delta, LZ4),",
			"error_message String CODEC(ZSTD),", "TTL bucket + INTERVAL 9 DAY", "MODIFY TTL created_at + INTERVAL 9 DAY"}},
	}
	for _, c := range cases {
		t.Run(c.version, func(t *testing.T) {
			f, err := requestlogview.FeaturesFor(c.version)
			if err != nil {
				t.Fatal(err)
			}
			fsys, err := requestlogview.ClickHouseSchema(f, 9)
			if err != nil {
				t.Fatal(err)
			}
			names, _ := fs.Glob(fsys, "*.sql")
			if strings.Join(names, " ") != "00001_requestlog.sql 00003_reported_by.sql" {
				t.Fatalf("migrations %v", names)
			}
			b, err := fs.ReadFile(fsys, names[0])
			if err != nil {
				t.Fatal(err)
			}
			sql := string(b)
			// 00001 creates the raw table as it first was: 18.16 cannot add
			// a column only if missing, so 00003 must find it missing.
			if strings.Contains(sql, "reported_by") {
				t.Error("00001 creates reported_by")
			}
			if b, err := fs.ReadFile(fsys, names[1]); err != nil || !strings.Contains(string(b), "ALTER TABLE requestlog_raw ADD COLUMN reported_by String DEFAULT '';") {
				t.Errorf("00003: %s %v", b, err)
			}
			for _, s := range c.want {
				if !strings.Contains(sql, s) {
					t.Errorf("lacks %q", s)
				}
			}
			for _, s := range c.lack {
				if strings.Contains(sql, s) {
					t.Errorf("uses %q", s)
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
		})
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
	f := requestlogview.Features{LowCardinality: true, Codecs: true, TTL: true}
	for name, got := range map[string]string{
		"DDL":        all(requestlogview.DDL(shadow, f, 30)),
		"TableDDL":   all(requestlogview.TableDDL(shadow, f, 30)),
		"ViewDDL":    all(requestlogview.ViewDDL(shadow, f)),
		"RollupFill": all(requestlogview.RollupFill(shadow)),
	} {
		for _, w := range strings.FieldsFunc(got, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == '(' || r == ')' || r == ',' }) {
			if strings.HasPrefix(w, "requestlog_") && !strings.Contains(w, "__shadow") {
				t.Errorf("%s names the live %s", name, w)
			}
		}
	}
	if tables := all(requestlogview.TableDDL(shadow, f, 30)); strings.Contains(tables, "MATERIALIZED VIEW") {
		t.Error("TableDDL creates views")
	}
	if views := all(requestlogview.ViewDDL(shadow, f)); strings.Count(views, "CREATE MATERIALIZED VIEW") != 3 || strings.Contains(views, "CREATE TABLE") {
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
	f, err := requestlogview.ServerFeatures(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	// Half made before goose ran: the migration completes it.
	stmts, err := requestlogview.DDL(requestlogview.LiveTables(), f, 30)
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
	schema, err := requestlogview.ClickHouseSchema(f, 30)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	for range 2 {
		if err := migrate.ClickHouse(ctx, db, quiet, migrate.Schema{Owner: "readmodels/requestlogview", FS: schema}); err != nil {
			t.Fatal(err)
		}
	}
	if err := requestlogview.CreateTables(ctx, conn, requestlogview.LiveTables(), 30); err != nil { // idempotent beside it
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	// 18.16 takes inserts only as native data blocks, with the columns named.
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+requestlogview.RawTable+" (id, created_at, service_name, method_name, status, duration_ms)")
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{now, now.AddDate(0, 0, -29), now.AddDate(0, 0, -31), now.AddDate(0, 0, -40)} {
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
	if n != 8 { // two old days in each of four tables
		t.Fatalf("dropped %d partitions, want 8", n)
	}
	for _, table := range requestlogview.LiveTables().All() {
		var rows uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != 2 {
			t.Errorf("%s holds %d rows after retention, want 2", table, rows)
		}
	}
	// Down drops the column, then every table and view; up brings them back.
	p, err := migrate.NewClickHouseProvider(db, migrate.Schema{Owner: "readmodels/requestlogview", FS: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Down(ctx); err != nil {
		t.Fatal(err)
	}
	var cols uint64
	if err := db.QueryRowContext(ctx, "SELECT count() FROM system.columns WHERE database = currentDatabase() AND table = 'requestlog_raw' AND name = 'reported_by'").Scan(&cols); err != nil || cols != 0 {
		t.Fatalf("reported_by after one down: %d, %v", cols, err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatal(err)
	}
	var left uint64
	if err := db.QueryRowContext(ctx, "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name LIKE 'requestlog%'").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d request-log tables after down, %v", left, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name LIKE 'requestlog%'").Scan(&left); err != nil || left != 7 {
		t.Fatalf("%d request-log tables after up, %v", left, err)
	}
}
