package migrate_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/migrate"
)

// states is a plan as "version:applied" words, and each step's Up.
func states(steps []migrate.Step) (string, []string) {
	var w, ups []string
	for _, s := range steps {
		w = append(w, fmt.Sprintf("%d:%v", s.Version, s.Applied))
		ups = append(ups, s.Up)
	}
	return strings.Join(w, " "), ups
}

// A plan names applied and pending migrations with what each runs, and
// asking for it changes nothing: no version table, no database made.
func TestPlans(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := migrate.Schema{Owner: "a", FS: fstest.MapFS{
		"00001_a.sql": sqlFile("CREATE TABLE IF NOT EXISTS plan_a %s;", "DROP TABLE plan_a;"),
	}}
	both := migrate.Schema{Owner: "a", FS: fstest.MapFS{
		"00001_a.sql": first.FS.(fstest.MapFS)["00001_a.sql"],
		"00002_b.sql": sqlFile("-- +goose StatementBegin\nCREATE TABLE IF NOT EXISTS plan_b %s;\n-- +goose StatementEnd", "DROP TABLE plan_b;"),
	}}
	render := func(s migrate.Schema, engine string) migrate.Schema {
		out := fstest.MapFS{}
		for name, f := range s.FS.(fstest.MapFS) {
			out[name] = &fstest.MapFile{Data: []byte(fmt.Sprintf(string(f.Data), engine))}
		}
		return migrate.Schema{Owner: s.Owner, FS: out}
	}
	wantUps := func(engine string) []string {
		return []string{fmt.Sprintf("CREATE TABLE IF NOT EXISTS plan_a %s;", engine), fmt.Sprintf("CREATE TABLE IF NOT EXISTS plan_b %s;", engine)}
	}

	t.Run("postgres", func(t *testing.T) {
		pool := testenv.EmptyPostgres(t)
		pg := func(s migrate.Schema) migrate.Schema { return render(s, "(id bigint)") }
		steps, err := migrate.PostgresPlan(ctx, pool, pg(both))
		if got, ups := states(steps); err != nil || got != "1:false 2:false" || strings.Join(ups, "|") != strings.Join(wantUps("(id bigint)"), "|") {
			t.Fatalf("fresh database: %q %q, %v", got, ups, err)
		}
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil || exists {
			t.Fatalf("the plan created goose's version table (%v, %v)", exists, err)
		}
		if err := migrate.Postgres(ctx, pool, quiet, pg(first)); err != nil {
			t.Fatal(err)
		}
		steps, err = migrate.PostgresPlan(ctx, pool, pg(both))
		if got, _ := states(steps); err != nil || got != "1:true 2:false" || steps[0].AppliedAt.IsZero() {
			t.Fatalf("after the first: %q, %v", got, err)
		}
	})

	t.Run("clickhouse", func(t *testing.T) {
		opts, _ := testenv.ClickHouse(t)
		ch := func(s migrate.Schema) migrate.Schema { return render(s, "(id Int64) ENGINE = Log") }
		missing := strings.Replace(testenv.ClickHouseAdminURL(), "/default", "/"+opts.Auth.Database+"_none", 1)
		steps, err := migrate.ClickHousePlan(ctx, missing, ch(both))
		if got, ups := states(steps); err != nil || got != "1:false 2:false" || strings.Join(ups, "|") != strings.Join(wantUps("(id Int64) ENGINE = Log"), "|") {
			t.Fatalf("missing database: %q %q, %v", got, ups, err)
		}
		db := clickhouse.OpenDB(opts)
		defer db.Close()
		var n uint64
		if err := db.QueryRowContext(ctx, `SELECT count() FROM system.databases WHERE name = ?`, opts.Auth.Database+"_none").Scan(&n); err != nil || n != 0 {
			t.Fatalf("the plan created the database (%d, %v)", n, err)
		}
		dsn := strings.Replace(testenv.ClickHouseAdminURL(), "/default", "/"+opts.Auth.Database, 1)
		if err := migrate.ClickHouse(ctx, db, quiet, ch(first)); err != nil {
			t.Fatal(err)
		}
		steps, err = migrate.ClickHousePlan(ctx, dsn, ch(both))
		if got, _ := states(steps); err != nil || got != "1:true 2:false" {
			t.Fatalf("after the first: %q, %v", got, err)
		}
	})
}
