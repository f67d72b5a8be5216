package schemas_test

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/migrate"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

var quiet = slog.New(slog.DiscardHandler)

// created matches what a migration creates: a table, view, sequence or
// function, by name.
var created = regexp.MustCompile(`(?i)\bCREATE\s+(?:OR\s+REPLACE\s+)?(TABLE|MATERIALIZED\s+VIEW|VIEW|SEQUENCE|FUNCTION)\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)`)

// upSection is a migration's Up part: its Down part re-creates what an
// earlier migration made (00003 down brings back 00001's trigger function).
func upSection(sql string) string {
	if i := strings.Index(sql, "-- +goose Down"); i >= 0 {
		return sql[:i]
	}
	return sql
}

// Every table (and view, sequence, function) is created by one owner only,
// whichever ClickHouse server version the migrations are rendered for.
func TestOneOwnerPerTable(t *testing.T) {
	pg, err := schemas.Postgres()
	if err != nil {
		t.Fatal(err)
	}
	all := append([]migrate.Schema{}, pg...)
	for _, v := range []string{"18.16.1", "24.8.4.13"} {
		ch, err := schemas.ClickHouseFor(v)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ch...)
	}
	owner := map[string]string{}
	for _, s := range all {
		names, err := fs.Glob(s.FS, "*.sql")
		if err != nil || len(names) == 0 {
			t.Fatalf("%s has no migrations: %v", s.Owner, err)
		}
		for _, name := range names {
			b, err := fs.ReadFile(s.FS, name)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range created.FindAllStringSubmatch(upSection(string(b)), -1) {
				obj := strings.ToLower(m[2])
				if other, ok := owner[obj]; ok && other != s.Owner {
					t.Errorf("%s is created by %s and by %s", obj, other, s.Owner)
				}
				owner[obj] = s.Owner
			}
		}
	}
	for _, obj := range []string{"events", "users", "api_keys", "task_runs", "consumer_offsets", "requestlog_generation", "requestlog_raw", "requestlog_day_mv"} {
		if owner[obj] == "" {
			t.Errorf("no owner creates %s", obj)
		}
	}
}

// Every schema file in the tree belongs to an owner the wiring lists: a
// migration dropped into a package that is not listed would never run.
func TestEverySchemaFileIsWired(t *testing.T) {
	pg, err := schemas.Postgres()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := schemas.ClickHouseFor(requestlogview.MinServerVersion)
	if err != nil {
		t.Fatal(err)
	}
	wired := map[string]bool{}
	for _, s := range pg {
		names, _ := fs.Glob(s.FS, "*.sql")
		for _, n := range names {
			wired[filepath.Join(s.Owner, "schema", n)] = true
		}
	}
	for _, s := range ch {
		names, _ := fs.Glob(s.FS, "*.sql")
		for _, n := range names {
			wired[filepath.Join(s.Owner, "schema", "clickhouse", n+".tmpl")] = true
		}
	}
	root := filepath.Join("..", "..", "..")
	seen := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".sql") || strings.HasSuffix(path, ".sql.tmpl")) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "-- +goose Up") {
			return nil // a template of statements, not a migration
		}
		seen++
		if !wired[rel] {
			t.Errorf("%s is a migration no listed owner hands to deploy/migrate", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(wired) {
		t.Errorf("found %d migration files in the tree, the wiring lists %d", seen, len(wired))
	}
}

// catalog describes everything the migrations made in the public schema.
func catalog(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	return testenv.Dump(t, pool,
		`SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '') FROM information_schema.columns
			WHERE table_schema = 'public' AND table_name <> 'goose_db_version' ORDER BY table_name, column_name`,
		`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename <> 'goose_db_version' ORDER BY indexname`,
		`SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY conname`,
		`SELECT proname, pg_get_function_identity_arguments(oid) FROM pg_proc WHERE pronamespace = 'public'::regnamespace ORDER BY proname`,
		`SELECT sequencename FROM pg_sequences WHERE schemaname = 'public' ORDER BY sequencename`,
		`SELECT version_id FROM goose_db_version WHERE is_applied ORDER BY version_id`,
	)
}

// A database migrated by the code before the migrations moved to their
// owners (all files in deploy/migrations/postgres, kept in testdata/before)
// has nothing pending afterwards and ends up with the schema a new
// database gets.
func TestUpgradeFromOneDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := testenv.EmptyPostgres(t)
	db := stdlib.OpenDBFromPool(old)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS(filepath.Join("testdata", "before")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	owners, err := schemas.Postgres()
	if err != nil {
		t.Fatal(err)
	}
	np, err := migrate.NewPostgresProvider(db, owners...)
	if err != nil {
		t.Fatal(err)
	}
	// Every migration the old directory held counts as applied; only the
	// ones added since the move (00014 on) are pending.
	moved, err := fs.Glob(os.DirFS(filepath.Join("testdata", "before")), "*.sql")
	if err != nil || len(moved) == 0 {
		t.Fatal(moved, err)
	}
	slices.Sort(moved)
	last, err := strconv.ParseInt(strings.SplitN(moved[len(moved)-1], "_", 2)[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := np.GetDBVersion(ctx); err != nil || cur != last {
		t.Fatalf("version after the move: %d, %v; want %d", cur, err, last)
	}
	newer := false
	for _, src := range np.ListSources() {
		newer = newer || src.Version > last
	}
	if pending, err := np.HasPending(ctx); err != nil || pending != newer {
		t.Fatalf("pending after the move: %v, %v; want %v", pending, err, newer)
	}
	if err := schemas.UpPostgres(ctx, old, quiet); err != nil {
		t.Fatal(err)
	}
	upgraded := catalog(t, old)
	fresh := testenv.EmptyPostgres(t)
	if err := schemas.UpPostgres(ctx, fresh, quiet); err != nil {
		t.Fatal(err)
	}
	if got := catalog(t, fresh); got != upgraded {
		t.Fatalf("a new database differs from an upgraded one:\n%s\nupgraded:\n%s", got, upgraded)
	}
}

// The ClickHouse tables come from goose at migrate time, in a database it
// creates if needed.
func TestUpClickHouse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts, conn := testenv.ClickHouse(t)
	dsn := strings.Replace(testenv.ClickHouseAdminURL(), "/default", "/"+opts.Auth.Database, 1)
	for range 2 {
		if err := schemas.UpClickHouse(ctx, dsn, quiet); err != nil {
			t.Fatal(err)
		}
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name LIKE 'requestlog%'").Scan(&n); err != nil || n != 7 {
		t.Fatalf("%d request-log tables and views, %v", n, err)
	}
	// Issue #20 point 6: partitions are UTC days whatever the server's
	// time zone (this test server runs in UTC, so the DDL is what shows it);
	// the hour and day rollups, which long windows read, UTC weeks (issue
	// #22 point 7).
	rows, err := conn.Query(ctx, "SELECT name, engine_full FROM system.tables WHERE database = currentDatabase() AND engine LIKE '%MergeTree' AND name LIKE 'requestlog%'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	tables := 0
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"requestlog_raw": "PARTITION BY toYYYYMMDD(created_at, 'UTC')", "requestlog_minute": "PARTITION BY toYYYYMMDD(bucket, 'UTC')",
			"requestlog_hour": "PARTITION BY toMonday(bucket, 'UTC')", "requestlog_day": "PARTITION BY toMonday(bucket, 'UTC')",
		}[name]
		if want == "" || !strings.Contains(engine, want) {
			t.Errorf("%s: want %q: %s", name, want, engine)
		}
		// Issue #22 point 7: a window's rollup read takes whole granules.
		if rollup := name != "requestlog_raw"; rollup != strings.Contains(engine, "index_granularity = 1024") {
			t.Errorf("%s: want granules of 1024 rows in the rollups only: %s", name, engine)
		}
		tables++
	}
	if tables != 4 {
		t.Errorf("%d MergeTree tables, want the raw table and three rollups", tables)
	}
}
