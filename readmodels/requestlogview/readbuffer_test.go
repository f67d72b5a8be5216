package requestlogview_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// Every read of the rollups asks for small read buffers: ClickHouse 18.16
// gives each column of each part it opens a buffer of max_read_buffer_size
// (1 MiB by default), which made a long window's question allocate 160 MB
// and take half again as long. The server's query log shows the setting
// each question ran with.
func TestRollupReadsUseSmallBuffers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts, conn := testenv.ClickHouse(t)
	if err := requestlogview.CreateTables(ctx, conn, requestlogview.LiveTables()); err != nil {
		t.Fatal(err)
	}
	logged := *opts
	logged.Settings = clickhouse.Settings{"log_queries": 1}
	lc, err := clickhouse.Open(&logged)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	store := requestlogview.New(lc, clock, nil)
	prefix := fmt.Sprintf("rollup-read-%d-", time.Now().UnixNano())
	questions := map[string]func(context.Context) error{
		"overview": func(ctx context.Context) error { _, err := store.Overview(ctx, 720); return err },
		"services": func(ctx context.Context) error { _, err := store.Services(ctx, 720); return err },
		"methods":  func(ctx context.Context) error { _, err := store.Methods(ctx, 720, ""); return err },
		"timeline": func(ctx context.Context) error { _, err := store.Timeline(ctx, 720, ""); return err },
		"latency": func(ctx context.Context) error {
			_, err := store.Latency(ctx, requestlogview.SeriesFilter{Hours: 720})
			return err
		},
	}
	for name, ask := range questions {
		if err := ask(clickhouse.Context(ctx, clickhouse.WithQueryID(prefix+name))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for name := range questions {
		buffer, err := loggedSetting(ctx, conn, prefix+name, "max_read_buffer_size")
		if err != nil {
			t.Fatalf("%s in the query log: %v", name, err)
		}
		if buffer != "65536" {
			t.Errorf("%s read the rollups with max_read_buffer_size %q, want 65536", name, buffer)
		}
	}
}

// loggedSetting is the setting a finished query ran with, from the query
// log. The server logs a query when it has let go of it, which can be
// just after the client read the last row: hence the wait.
func loggedSetting(ctx context.Context, conn driver.Conn, queryID, setting string) (string, error) {
	var err error
	for range 50 {
		if err = conn.Exec(ctx, "SYSTEM FLUSH LOGS"); err != nil {
			return "", err
		}
		var v string
		err = conn.QueryRow(ctx, "SELECT Settings.Values[indexOf(Settings.Names, ?)] FROM system.query_log WHERE type = 2 AND query_id = ?",
			setting, queryID).Scan(&v)
		if !errors.Is(err, sql.ErrNoRows) {
			return v, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", err
}
