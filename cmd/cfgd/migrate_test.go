package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// `cfgd migrate` creates the ClickHouse database and its tables through
// goose, and a second run finds nothing to do.
func TestMigrateCommand(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	opts, conn := testenv.ClickHouse(t)
	name := opts.Auth.Database + "_migrate"
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name) })
	t.Setenv("CLICKHOUSE__URL", strings.Replace(testenv.ClickHouseAdminURL(), "/default", "/"+name, 1))
	for range 2 {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), []string{"migrate"}, &stdout, &stderr); err != nil {
			t.Fatalf("migrate: %v\n%s", err, stderr.String())
		}
	}
	var tables []string
	rows, err := conn.Query(context.Background(), "SELECT name FROM system.tables WHERE database = ? ORDER BY name", name)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	want := "goose_db_version requestlog_day requestlog_day_mv requestlog_hour requestlog_hour_mv requestlog_minute requestlog_minute_mv requestlog_raw"
	if got := strings.Join(tables, " "); got != want {
		t.Fatalf("clickhouse tables %q, want %q", got, want)
	}
	var versions uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM "+name+".goose_db_version WHERE version_id = 1").Scan(&versions); err != nil || versions != 1 {
		t.Fatalf("version 1 recorded %d times, %v", versions, err)
	}
}

// `cfgd migrate status` and `--dry-run` on a database never migrated list
// every migration as pending (the dry run with its statements) and create
// nothing; after `cfgd migrate` status says applied and the dry run has
// nothing to apply.
func TestMigrateStatusAndDryRun(t *testing.T) {
	ctx := context.Background()
	pool := testenv.EmptyPostgres(t)
	baseEnv(t, pool.Config().ConnString())
	opts, conn := testenv.ClickHouse(t)
	name := opts.Auth.Database + "_plan"
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name) })
	t.Setenv("CLICKHOUSE__URL", strings.Replace(testenv.ClickHouseAdminURL(), "/default", "/"+name, 1))
	cli := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := run(ctx, args, &stdout, &stderr); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr.String())
		}
		return stdout.String()
	}

	status := cli("migrate", "status")
	pending := regexp.MustCompile(`(?m)^  \d{5}_\w+\.sql +pending$`)
	applied := regexp.MustCompile(`(?m)^  \d{5}_\w+\.sql +applied \d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`)
	for _, want := range []string{"postgres: 0 applied, ", "clickhouse: 0 applied, ", "00001_event_store.sql", "00001_requestlog.sql"} {
		if !strings.Contains(status, want) {
			t.Errorf("status of a fresh database lacks %q:\n%s", want, status)
		}
	}
	steps := len(pending.FindAllString(status, -1))
	if steps < 15 || applied.MatchString(status) {
		t.Errorf("status of a fresh database lists %d pending migrations:\n%s", steps, status)
	}
	dry := cli("migrate", "--dry-run")
	for _, want := range []string{"postgres: would apply", "clickhouse: would apply", "-- 00001_requestlog.sql", "CREATE TABLE IF NOT EXISTS"} {
		if !strings.Contains(dry, want) {
			t.Errorf("dry run lacks %q:\n%.2000s", want, dry)
		}
	}
	var pgTables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&pgTables); err != nil || pgTables != 0 {
		t.Errorf("status and dry run made %d Postgres tables (%v)", pgTables, err)
	}
	var dbs uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", name).Scan(&dbs); err != nil || dbs != 0 {
		t.Errorf("status and dry run made the ClickHouse database (%d, %v)", dbs, err)
	}

	cli("migrate")
	status = cli("migrate", "status")
	if pending.MatchString(status) || len(applied.FindAllString(status, -1)) != steps || !strings.Contains(status, "clickhouse: ") {
		t.Errorf("status after migrate:\n%s", status)
	}
	if dry := cli("migrate", "--dry-run"); dry != "postgres: nothing to apply\nclickhouse: nothing to apply\n" {
		t.Errorf("dry run after migrate: %q", dry)
	}
}
