package requestlogview_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// A replay's RENAME TABLE moves the request-log tables one at a time on
// ClickHouse 18.16: a query meeting a live name missing for a moment asks
// again instead of failing; a table that stays missing still fails.
func TestQueriesRideOutASwap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := seed(t, row{now.Add(-time.Minute), "s", "m", "success", 1}, row{now.Add(-2 * time.Minute), "s", "m", "error", 2})
	store := requestlogview.New(conn, clock, nil)
	rename := func(from, to string) {
		t.Helper()
		if err := conn.Exec(ctx, "RENAME TABLE "+from+" TO "+to); err != nil {
			t.Fatal(err)
		}
	}

	rename("requestlog_raw", "requestlog_raw__moving")
	type answer struct {
		count int64
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		_, count, err := store.Requests(ctx, requestlogview.Filter{})
		done <- answer{count, err}
	}()
	time.Sleep(150 * time.Millisecond) // the query has met the missing table by now
	rename("requestlog_raw__moving", "requestlog_raw")
	if a := <-done; a.err != nil || a.count != 2 {
		t.Fatalf("query across the swap: count %d, err %v", a.count, a.err)
	}

	rename("requestlog_raw", "requestlog_raw__gone")
	start := time.Now()
	if _, _, err := store.Requests(ctx, requestlogview.Filter{}); err == nil {
		t.Fatal("query of a missing table succeeded")
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("a missing table failed after %v", waited)
	}
}

// A swap on a cluster creates the views server by server: the same
// statements as ON CLUSTER, with the database-qualified names, run on the
// server they are sent to alone.
func TestServerViewDDLIsClusterViewDDLOnOneServer(t *testing.T) {
	c := requestlogview.Cluster{Name: "cfgd", Database: "db"}
	live := requestlogview.LiveTables()
	onCluster, err := requestlogview.ClusterViewDDL(live, c)
	if err != nil {
		t.Fatal(err)
	}
	one, err := requestlogview.ServerViewDDL(live, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != len(onCluster) || len(one) != 3 {
		t.Fatalf("%d statements, want %d", len(one), len(onCluster))
	}
	for i := range one {
		if want := strings.Replace(onCluster[i], " ON CLUSTER cfgd", "", 1); one[i] != want {
			t.Errorf("statement %d:\n%s\nwant\n%s", i, one[i], want)
		}
		if !strings.Contains(one[i], "TO db."+live.Rollups()[i]+requestlogview.LocalSuffix+" AS") {
			t.Errorf("statement %d does not feed db.%s_local: %s", i, live.Rollups()[i], one[i])
		}
	}
}
