//go:build cluster

package sinks

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// distributedRaw counts requestlog_raw through conn's Distributed table
// with settings s (nil: the server's).
func distributedRaw(conn driver.Conn, s clickhouse.Settings) (uint64, error) {
	ctx := context.Background()
	if s != nil {
		ctx = clickhouse.Context(ctx, clickhouse.WithSettings(s))
	}
	var n uint64
	err := conn.QueryRow(ctx, "SELECT count() FROM requestlog_raw").Scan(&n)
	return n, err
}

// A shard's first replica (s1r1) is killed, the sink writes to the second
// meanwhile, and s1r1 comes back: until it has fetched what it missed it
// answers reads, and load_balancing in_order sends shard 1's reads to it.
// A sink of a new consumer group (a replay, or any sink re-reading its
// offset check after a rebalance) that starts right then must not take
// s1r1's offsets for what the shard holds, or it inserts again what s1r2
// holds.
func TestClusterReturningReplicaOffsets(t *testing.T) {
	db, conn, _ := clusterDB(t)
	e := clusterEnv(t, conn)
	e.clusterSink("live", nil)
	from := time.Now().Add(-time.Hour)
	e.spread(400, from, 10*time.Millisecond)
	testenv.ExactRequestLogs(t, conn, 400)

	testenv.ClusterScript(t, "kill", "s1r1")
	t.Cleanup(func() { testenv.ClusterScript(t, "start", "s1r1") })
	e.spread(400, from.Add(time.Minute), 10*time.Millisecond)
	testenv.ExactRequestLogs(t, conn, 800)
	testenv.ClusterScript(t, "start", "s1r1")
	_, resume := testenv.ClusterHoldFetches(t, db, "s1r1")
	// As the sink's connection reaches it: s1r1 first.
	s1r1, err := clickhouse.Open(&clickhouse.Options{Addr: []string{testenv.ClusterNodeAddr("s1r1"), testenv.ClusterNodeAddr("s2r1")},
		Auth: clickhouse.Auth{Database: db}, DialTimeout: time.Second, ConnOpenStrategy: clickhouse.ConnOpenInOrder})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s1r1.Close() })

	stale, err := distributedRaw(s1r1, nil)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := distributedRaw(s1r1, requestlogview.CaughtUpReads())
	t.Logf("s1r1 back, its fetches held: the Distributed table through it holds %d of 800 rows; read without lagging replicas %d (err %v)", stale, fresh, err)
	if stale >= 800 {
		t.Fatal("s1r1 was not behind when read: the test did not reach the window it is about")
	}

	e.conn = s1r1
	r, _ := e.clusterSink("again", nil)
	waitFor(t, "the new group to read the topic", func() bool { st := r.Stats(); return st.Skipped+st.Inserted >= 800 })
	if st := r.Stats(); st.Inserted != 0 {
		t.Errorf("the new group inserted %d rows again (stats %+v), want 0", st.Inserted, st)
	}

	// s1r2 fails too: no replica of shard 1 is caught up, so the offset
	// check of another new group fails and its batch waits, saying so,
	// until s1r2 is back.
	testenv.ClusterScript(t, "kill", "s1r2")
	t.Cleanup(func() { testenv.ClusterScript(t, "start", "s1r2") })
	third, _ := e.clusterSink("third", nil)
	waitFor(t, "the third group's sink to say it is not keeping up", func() bool { return third.Ready(context.Background()) != nil })
	time.Sleep(2 * time.Second)
	if st := third.Stats(); st.Inserted != 0 || st.Skipped >= 800 {
		t.Fatalf("with shard 1's caught-up replica down, the third group went on: %+v", st)
	}
	t.Logf("third group waits: %v", third.Ready(context.Background()))
	testenv.ClusterScript(t, "start", "s1r2")
	waitFor(t, "the third group to read the topic once s1r2 is back", func() bool { st := third.Stats(); return st.Skipped+st.Inserted >= 800 })
	if st := third.Stats(); st.Inserted != 0 {
		t.Errorf("the third group inserted %d rows again (stats %+v), want 0", st.Inserted, st)
	}
	resume()
	testenv.ExactRequestLogs(t, conn, 800)
}
