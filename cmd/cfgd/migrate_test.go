package main

import (
	"bytes"
	"context"
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
