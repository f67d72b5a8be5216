package migrate_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/migrate"
)

func clickhouseDB(t *testing.T) *sql.DB {
	t.Helper()
	opts, _ := testenv.ClickHouse(t)
	db := clickhouse.OpenDB(opts)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func chTables(t *testing.T, db *sql.DB) string {
	t.Helper()
	var s string
	if err := db.QueryRow(`SELECT arrayStringConcat(groupArray(name), ' ') FROM
		(SELECT name FROM system.tables WHERE database = currentDatabase() AND name != ? ORDER BY name)`, migrate.ClickHouseVersionTable).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Up, status and down through goose on the server here (18.16), whose own
// ClickHouse dialect goose cannot use.
func TestClickHouseUpStatusDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := clickhouseDB(t)
	a := migrate.Schema{Owner: "a", FS: fstest.MapFS{
		"00001_a.sql": sqlFile("CREATE TABLE IF NOT EXISTS a (id UInt64) ENGINE = MergeTree ORDER BY id;\nCREATE TABLE IF NOT EXISTS a2 (id UInt64) ENGINE = MergeTree ORDER BY id;", "DROP TABLE a2;\nDROP TABLE a;"),
		"00002_b.sql": sqlFile("CREATE TABLE IF NOT EXISTS b (id UInt64) ENGINE = MergeTree ORDER BY id;", "DROP TABLE b;"),
	}}
	for range 2 {
		if err := migrate.ClickHouse(ctx, db, quiet, a); err != nil {
			t.Fatal(err)
		}
	}
	if got := chTables(t, db); got != "a a2 b" {
		t.Fatalf("tables after up: %q", got)
	}
	p, err := migrate.NewClickHouseProvider(db, a)
	if err != nil {
		t.Fatal(err)
	}
	status, err := p.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range status {
		if s.State != "applied" || s.AppliedAt.IsZero() {
			t.Fatalf("status of %d: %s at %v", s.Source.Version, s.State, s.AppliedAt)
		}
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 2 {
		t.Fatalf("version %d, %v", v, err)
	}
	if _, err := p.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if got := chTables(t, db); got != "a a2" {
		t.Fatalf("tables after down: %q", got)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 1 {
		t.Fatalf("version after down %d, %v", v, err)
	}
	if pending, err := p.HasPending(ctx); err != nil || !pending {
		t.Fatalf("pending after down: %v, %v", pending, err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := chTables(t, db); got != "" {
		t.Fatalf("tables after down to 0: %q", got)
	}
	if err := migrate.ClickHouse(ctx, db, quiet, a); err != nil {
		t.Fatal(err)
	}
	if got := chTables(t, db); got != "a a2 b" {
		t.Fatalf("tables after up again: %q", got)
	}
}

// A database whose tables were made before ClickHouse migrations ran
// through goose: the first migration (IF NOT EXISTS) finds them, keeps
// their rows and is recorded.
func TestClickHouseAdoptsExistingTables(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := clickhouseDB(t)
	if _, err := db.ExecContext(ctx, "CREATE TABLE a (id UInt64) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO a (id) SELECT 7"); err != nil {
		t.Fatal(err)
	}
	a := migrate.Schema{Owner: "a", FS: fstest.MapFS{
		"00001_a.sql": sqlFile("CREATE TABLE IF NOT EXISTS a (id UInt64) ENGINE = MergeTree ORDER BY id;", "DROP TABLE a;"),
	}}
	if err := migrate.ClickHouse(ctx, db, quiet, a); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := db.QueryRowContext(ctx, "SELECT count() FROM a").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows %d, %v", n, err)
	}
}

// Two processes that migrate at once both record a version (ClickHouse has
// no lock to stop them); goose still sees each version once.
func TestClickHouseDuplicateVersionRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := clickhouseDB(t)
	a := migrate.Schema{Owner: "a", FS: fstest.MapFS{
		"00001_a.sql": sqlFile("CREATE TABLE IF NOT EXISTS a (id UInt64) ENGINE = MergeTree ORDER BY id;", "DROP TABLE a;"),
	}}
	if err := migrate.ClickHouse(ctx, db, quiet, a); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+migrate.ClickHouseVersionTable+" (version_id, is_applied) SELECT 1, 1"); err != nil {
		t.Fatal(err)
	}
	p, err := migrate.NewClickHouseProvider(db, a)
	if err != nil {
		t.Fatal(err)
	}
	status, err := p.Status(ctx)
	if err != nil || len(status) != 1 || status[0].State != "applied" {
		t.Fatalf("status %+v, %v", status, err)
	}
	if _, err := p.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 0 {
		t.Fatalf("version after down %d, %v", v, err)
	}
}

func TestOpenClickHouseCreatesTheDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts, _ := testenv.ClickHouse(t)
	name := opts.Auth.Database + "_new"
	dsn := strings.Replace(testenv.ClickHouseAdminURL(), "/default", "/"+name, 1)
	db, err := migrate.OpenClickHouse(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name) })
	var cur string
	if err := db.QueryRowContext(ctx, "SELECT currentDatabase()").Scan(&cur); err != nil || cur != name {
		t.Fatalf("database %q, %v", cur, err)
	}
	v, err := migrate.ClickHouseServerVersion(ctx, db)
	if err != nil || !strings.Contains(v, ".") {
		t.Fatalf("version %q, %v", v, err)
	}
}

// Two processes starting at once both migrate (ClickHouse has no lock):
// the DDL is IF NOT EXISTS, so both succeed and the schema is made once.
func TestClickHouseConcurrentStarts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := clickhouseDB(t)
	a := migrate.Schema{Owner: "a", FS: fstest.MapFS{
		"00001_a.sql": sqlFile("CREATE TABLE IF NOT EXISTS a (id UInt64) ENGINE = MergeTree ORDER BY id;", "DROP TABLE a;"),
		"00002_b.sql": sqlFile("CREATE TABLE IF NOT EXISTS b (id UInt64) ENGINE = MergeTree ORDER BY id;", "DROP TABLE b;"),
	}}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- migrate.ClickHouse(ctx, db, quiet, a) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := chTables(t, db); got != "a b" {
		t.Fatalf("tables %q", got)
	}
	p, err := migrate.NewClickHouseProvider(db, a)
	if err != nil {
		t.Fatal(err)
	}
	if pending, err := p.HasPending(ctx); err != nil || pending {
		t.Fatalf("pending: %v, %v", pending, err)
	}
}

// A start that finds the version table another start has just created,
// before that one recorded the zero version in it, records the zero
// version too rather than fail: goose took an empty table for one whose
// zero version was lost ("missing zero version migration", seen in
// TestClickHouseConcurrentStarts once in a few hundred runs).
func TestClickHouseStartBesideAHalfCreatedVersionTable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := clickhouseDB(t)
	// As the other start leaves it between its CREATE and its INSERT.
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+migrate.ClickHouseVersionTable+
		" (version_id Int64, is_applied UInt8, tstamp DateTime DEFAULT now()) ENGINE = MergeTree ORDER BY (version_id, tstamp)"); err != nil {
		t.Fatal(err)
	}
	a := migrate.Schema{Owner: "a", FS: fstest.MapFS{
		"00001_a.sql": sqlFile("CREATE TABLE IF NOT EXISTS a (id UInt64) ENGINE = MergeTree ORDER BY id;", "DROP TABLE a;"),
	}}
	if err := migrate.ClickHouse(ctx, db, quiet, a); err != nil {
		t.Fatal(err)
	}
	// The other start's zero version arrives late: one version listed.
	if _, err := db.ExecContext(ctx, "INSERT INTO "+migrate.ClickHouseVersionTable+" (version_id, is_applied) SELECT 0, 1"); err != nil {
		t.Fatal(err)
	}
	if err := migrate.ClickHouse(ctx, db, quiet, a); err != nil {
		t.Fatal(err)
	}
	if got := chTables(t, db); got != "a" {
		t.Fatalf("tables %q", got)
	}
}
