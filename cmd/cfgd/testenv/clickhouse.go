package testenv

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
)

// ClickHouseAdminURL is the server tests create their databases on
// (deploy/scripts/local/stack.sh starts it); override with
// CFGD_TEST_CLICKHOUSE_URL.
func ClickHouseAdminURL() string {
	if u := os.Getenv("CFGD_TEST_CLICKHOUSE_URL"); u != "" {
		return u
	}
	return "clickhouse://127.0.0.1:9000/default"
}

// ClickHouse creates a database for t (cfgd_test_<random>), dropped when t
// ends, and returns its options (Auth.Database set) and an open connection
// to it.
func ClickHouse(t testing.TB) (*clickhouse.Options, driver.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts, err := clickhouse.ParseDSN(ClickHouseAdminURL())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := randomName("cfgd_test_")
	if err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: clickhouse is not reachable (run deploy/scripts/local/stack.sh up): %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := clickhouse.Open(opts)
		if err != nil {
			return
		}
		defer a.Close()
		_ = a.Exec(ctx, "DROP DATABASE IF EXISTS "+name)
	})
	dbOpts, _ := clickhouse.ParseDSN(ClickHouseAdminURL())
	dbOpts.Auth.Database = name
	conn, err := clickhouse.Open(dbOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return dbOpts, conn
}

// ClickHouseMigrated is ClickHouse with the database brought up by the
// ClickHouse migrations, as `cfgd migrate` does (the sinks create no
// tables of their own).
func ClickHouseMigrated(t testing.TB) (*clickhouse.Options, driver.Conn) {
	t.Helper()
	opts, conn := ClickHouse(t)
	MigrateClickHouse(t, opts.Auth.Database)
	return opts, conn
}

// MigrateClickHouse applies the ClickHouse migrations to database db of
// the test server.
func MigrateClickHouse(t testing.TB, db string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := strings.Replace(ClickHouseAdminURL(), "/default", "/"+db, 1)
	if err := schemas.UpClickHouse(ctx, dsn, Quiet()); err != nil {
		t.Fatalf("testenv: clickhouse migrations: %v", err)
	}
}
