//go:build cluster

package sinks

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
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
	s1r1 := holdFetches(t, db)

	stale, err := distributedRaw(s1r1, nil)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := distributedRaw(s1r1, clickhouse.Settings{"max_replica_delay_for_distributed_queries": 1,
		"fallback_to_stale_replicas_for_distributed_queries": 0})
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
	startFetches(t, s1r1)
	testenv.ExactRequestLogs(t, conn, 800)
}

// holdFetches stops fetches on s1r1 (just started again: its ZooKeeper
// session of before the kill still holds it read-only, so it has fetched
// nothing yet) and waits until it has loaded its replication queue: it
// is then back, answering reads, and behind by what it missed. Held
// fetches stand in for a replica with much to fetch after a long outage
// (here the parts are small and fetched within milliseconds). It returns
// a connection reaching s1r1 first.
func holdFetches(t *testing.T, db string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{testenv.ClusterNodeAddr("s1r1"), testenv.ClusterNodeAddr("s2r1")},
		Auth: clickhouse.Auth{Database: db}, DialTimeout: time.Second, ConnOpenStrategy: clickhouse.ConnOpenInOrder})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	if err := conn.Exec(ctx, "SYSTEM STOP FETCHES"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "SYSTEM START FETCHES") })
	start := time.Now()
	waitFor(t, "s1r1 to load its replication queue", func() bool {
		var readonly, queue, delay uint64
		if err := conn.QueryRow(ctx, "SELECT toUInt64(max(is_readonly)), toUInt64(sum(queue_size)), toUInt64(max(absolute_delay)) FROM system.replicas WHERE database = currentDatabase()").Scan(&readonly, &queue, &delay); err != nil {
			t.Logf("system.replicas on s1r1: %v", err)
			return false
		}
		if readonly == 0 && queue > 0 {
			t.Logf("s1r1 active %v after its start: %d entries queued, absolute delay %d s", time.Since(start).Round(time.Millisecond), queue, delay)
			return true
		}
		return false
	})
	return conn
}

func startFetches(t *testing.T, conn driver.Conn) {
	t.Helper()
	if err := conn.Exec(context.Background(), "SYSTEM START FETCHES"); err != nil {
		t.Fatal(err)
	}
}
