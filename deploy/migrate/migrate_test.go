package migrate_test

import (
	"context"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/migrate"
)

var quiet = slog.New(slog.DiscardHandler)

func sqlFile(up, down string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte("-- +goose Up\n" + up + "\n-- +goose Down\n" + down + "\n")}
}

func TestMerge(t *testing.T) {
	a := migrate.Schema{Owner: "a", FS: fstest.MapFS{
		"00001_a.sql": sqlFile("SELECT 1;", "SELECT 1;"),
		"00003_a.sql": sqlFile("SELECT 3;", "SELECT 3;"),
		"README.md":   {Data: []byte("not a migration")},
	}}
	b := migrate.Schema{Owner: "b", FS: fstest.MapFS{"00002_b.sql": sqlFile("SELECT 2;", "SELECT 2;")}}
	cases := []struct {
		name    string
		schemas []migrate.Schema
		want    []string
		err     string
	}{
		{name: "interleaved owners", schemas: []migrate.Schema{a, b}, want: []string{"00001_a.sql", "00002_b.sql", "00003_a.sql"}},
		{name: "one owner", schemas: []migrate.Schema{b}, want: []string{"00002_b.sql"}},
		{name: "nothing", err: "no schema"},
		{name: "a version twice", schemas: []migrate.Schema{a, {Owner: "c", FS: fstest.MapFS{"00003_c.sql": sqlFile("SELECT 3;", "SELECT 3;")}}},
			err: "version 3 is taken twice: a/00003_a.sql and c/00003_c.sql"},
		{name: "a file without a version", schemas: []migrate.Schema{{Owner: "d", FS: fstest.MapFS{"d.sql": sqlFile("SELECT 1;", "SELECT 1;")}}},
			err: "d: d.sql is not named NNNNN_name.sql"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys, err := migrate.Merge(c.schemas...)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Merge: %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := fs.Glob(fsys, "*.sql")
			if err != nil || strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Fatalf("Glob = %v, %v; want %v", got, err, c.want)
			}
			for _, name := range got {
				b, err := fs.ReadFile(fsys, name)
				if err != nil || !strings.HasPrefix(string(b), "-- +goose Up") {
					t.Fatalf("ReadFile(%s) = %q, %v", name, b, err)
				}
			}
			if _, err := fsys.Open("README.md"); err == nil {
				t.Fatal("a file that is not a migration is served")
			}
		})
	}
}

func TestFingerprintFollowsEveryFile(t *testing.T) {
	schema := func(body string) migrate.Schema {
		return migrate.Schema{Owner: "a", FS: fstest.MapFS{"00001_a.sql": sqlFile(body, "SELECT 1;")}}
	}
	other := migrate.Schema{Owner: "b", FS: fstest.MapFS{"00002_b.sql": sqlFile("SELECT 2;", "SELECT 2;")}}
	one, err := migrate.Fingerprint(schema("SELECT 1;"), other)
	if err != nil {
		t.Fatal(err)
	}
	same, _ := migrate.Fingerprint(other, schema("SELECT 1;"))
	changed, _ := migrate.Fingerprint(schema("SELECT 10;"), other)
	fewer, _ := migrate.Fingerprint(schema("SELECT 1;"))
	if one != same || one == changed || one == fewer || len(one) != 12 {
		t.Fatalf("fingerprints %s (same files %s, one changed %s, one less %s)", one, same, changed, fewer)
	}
}

func tables(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(table_name, ' ' ORDER BY table_name), '')
		FROM information_schema.tables WHERE table_schema = 'public' AND table_name <> 'goose_db_version'`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func versions(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), `SELECT string_agg(version_id::text, ' ' ORDER BY version_id) FROM goose_db_version WHERE is_applied`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A database migrated from one directory (all files in one place, as before
// the files moved to their owners) keeps its goose version table: the same
// versions spread over several owners are all applied already, and a new
// owner's migration is the only one that runs.
func TestPostgresUpgradeFromOneDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.EmptyPostgres(t)
	files := map[string]*fstest.MapFile{
		"00001_events.sql": sqlFile("CREATE TABLE events (id int);", "DROP TABLE events;"),
		"00002_users.sql":  sqlFile("CREATE TABLE users (id int);", "DROP TABLE users;"),
		"00003_wakeup.sql": sqlFile("ALTER TABLE events ADD COLUMN at timestamptz;", "ALTER TABLE events DROP COLUMN at;"),
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	old, err := goose.NewProvider(goose.DialectPostgres, db, fstest.MapFS(files))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Up(ctx); err != nil {
		t.Fatal(err)
	}
	store := migrate.Schema{Owner: "events/store", FS: fstest.MapFS{"00001_events.sql": files["00001_events.sql"], "00003_wakeup.sql": files["00003_wakeup.sql"]}}
	users := migrate.Schema{Owner: "readmodels/identityview", FS: fstest.MapFS{"00002_users.sql": files["00002_users.sql"]}}
	p, err := migrate.NewPostgresProvider(db, store, users)
	if err != nil {
		t.Fatal(err)
	}
	if pending, err := p.HasPending(ctx); err != nil || pending {
		t.Fatalf("pending after the move: %v, %v", pending, err)
	}
	keys := migrate.Schema{Owner: "readmodels/apikeyview", FS: fstest.MapFS{"00004_keys.sql": sqlFile("CREATE TABLE keys (id int);", "DROP TABLE keys;")}}
	for range 2 { // the second run finds nothing to do
		if err := migrate.Postgres(ctx, pool, quiet, store, users, keys); err != nil {
			t.Fatal(err)
		}
	}
	if got := tables(t, pool); got != "events keys users" {
		t.Fatalf("tables %q", got)
	}
	if got := versions(t, pool); got != "0 1 2 3 4" {
		t.Fatalf("versions %q", got)
	}
}

func TestPostgresTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.EmptyPostgres(t)
	a := migrate.Schema{Owner: "a", FS: fstest.MapFS{
		"00001_a.sql": sqlFile("CREATE TABLE a (id int);", "DROP TABLE a;"),
		"00003_c.sql": sqlFile("CREATE TABLE c (id int);", "DROP TABLE c;"),
	}}
	b := migrate.Schema{Owner: "b", FS: fstest.MapFS{"00002_b.sql": sqlFile("CREATE TABLE b (id int);", "DROP TABLE b;")}}
	if err := migrate.PostgresTo(ctx, pool, 2, a, b); err != nil {
		t.Fatal(err)
	}
	if got := tables(t, pool); got != "a b" {
		t.Fatalf("tables up to 2: %q", got)
	}
	if err := migrate.Postgres(ctx, pool, quiet, a, b); err != nil {
		t.Fatal(err)
	}
	if got := tables(t, pool); got != "a b c" {
		t.Fatalf("tables: %q", got)
	}
}

// Two processes starting at once both migrate; goose's advisory lock lets
// one apply and the other find nothing left.
func TestPostgresConcurrentStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.EmptyPostgres(t)
	s := migrate.Schema{Owner: "a", FS: fstest.MapFS{
		"00001_a.sql": sqlFile("CREATE TABLE a (id int);", "DROP TABLE a;"),
		"00002_b.sql": sqlFile("CREATE TABLE b (id int);", "DROP TABLE b;"),
	}}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- migrate.Postgres(ctx, pool, quiet, s) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := versions(t, pool); got != "0 1 2" {
		t.Fatalf("versions %q", got)
	}
}
