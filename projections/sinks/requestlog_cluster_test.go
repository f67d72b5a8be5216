//go:build cluster

package sinks

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// The cluster of deploy/scripts/cluster (make test-cluster starts it):
// two shards of two replicas, cluster "cfgd".
const testCluster = testenv.ClusterName

var clusterNodes = testenv.ClusterNodes()

// clusterDB migrates a database of its own on the cluster, as `cfgd
// migrate` with CLICKHOUSE__CLUSTER does, and returns a connection through
// s1r1 (s2r1 when s1r1 is down) and one to each node.
func clusterDB(t *testing.T) (string, driver.Conn, map[string]driver.Conn) {
	t.Helper()
	ctx := context.Background()
	db := fmt.Sprintf("cfgd_cluster_%d", time.Now().UnixNano())
	if err := schemas.UpClickHouseOn(ctx, "clickhouse://"+testenv.ClusterNodeAddr("s1r1")+","+testenv.ClusterNodeAddr("s2r1")+"/"+db, testCluster, testenv.Quiet()); err != nil {
		t.Fatal(err)
	}
	open := func(addrs ...string) driver.Conn {
		c, err := clickhouse.Open(&clickhouse.Options{Addr: addrs, Auth: clickhouse.Auth{Database: db},
			DialTimeout: time.Second, ConnOpenStrategy: clickhouse.ConnOpenInOrder})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	nodes := map[string]driver.Conn{}
	for _, n := range clusterNodes {
		nodes[n.Name] = open(n.Addr())
	}
	t.Cleanup(func() {
		// The replicas' ZooKeeper paths go with the tables.
		_ = nodes["s1r1"].Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" ON CLUSTER "+testCluster)
	})
	return db, open(testenv.ClusterNodeAddr("s1r1"), testenv.ClusterNodeAddr("s2r1")), nodes
}

// crashAt stops a sink at its n-th batch between insert and commit, as a
// cfgd replica killed there would (a sink's afterInsert).
func crashAt(n int64) func(*RequestLogs) error {
	var seen atomic.Int64
	return func(*RequestLogs) error {
		if seen.Add(1) == n {
			return errors.New("killed between insert and commit")
		}
		return nil
	}
}

// clusterSink starts a sink on conn in group, writing to the cluster;
// after (if not nil) runs between each insert and its commit.
func (e *replayEnv) clusterSink(group string, after func(*RequestLogs) error) (*RequestLogs, <-chan error) {
	e.t.Helper()
	cfg := DefaultRequestLogConfig(e.bus)
	cfg.Group = group
	cfg.Cluster = testCluster
	cfg.BatchRows = 300
	cfg.BatchWait = 50 * time.Millisecond
	cfg.MaxBackoff = 200 * time.Millisecond
	cfg.RetentionEvery = 500 * time.Millisecond
	cfg.Dial = testenv.ClusterDial
	s, err := NewFencedRequestLogs(cfg, e.conn, PostgresFence{Pool: e.pool}, testenv.Quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	if after != nil {
		s.afterInsert = func() error { return after(s) }
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() { done <- s.Run(ctx); close(exited) }()
	e.t.Cleanup(func() { cancel(); <-exited })
	return s, done
}

// replicaCounts reads, on one node, what its local tables hold: raw rows
// and the minute, hour and day rollups' requests.
func replicaCounts(t *testing.T, conn driver.Conn) [4]uint64 {
	t.Helper()
	var c [4]uint64
	ctx := context.Background()
	if err := conn.QueryRow(ctx, "SELECT count() FROM requestlog_raw_local").Scan(&c[0]); err != nil {
		t.Fatal(err)
	}
	for i, r := range requestlogview.LiveTables().Rollups() {
		if err := conn.QueryRow(ctx, "SELECT countMerge(requests) FROM "+r+requestlogview.LocalSuffix).Scan(&c[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// On a cluster of two shards of two replicas, two sinks (two cfgd
// replicas) ingest while one ClickHouse replica is killed (-9) and one sink
// stops between an insert and its commit; once the replica is back, every
// replica of each shard holds the same rows and rollups, the shards
// together exactly the events produced, and the statistics read through
// the Distributed tables of every node say so too. Then a retention drop
// reaches every replica, and a new consumer group re-reading the whole
// topic adds nothing.
// clusterEnv is a four-partition broker with its producer, Postgres for
// the fence, and conn, a database of the cluster.
func clusterEnv(t *testing.T, conn driver.Conn) *replayEnv {
	t.Helper()
	e := &replayEnv{rlEnv: &rlEnv{t: t, bus: testenv.Kafka(t, 4), conn: conn}, pool: testenv.Postgres(t)}
	pc := requestlogkafka.DefaultProducerConfig(e.bus)
	// A record goes to a random partition and a partition's rows to the
	// shard of its parity (the Distributed tables' key): records of 10
	// events make 30 records of 300, so that both shards get rows (tests
	// check that every shard holds some) but for a chance of 2^-29; at 50
	// events a record, six records all of one parity came up in about one
	// run in 32 (TestClusterReplayRefusedWhileAServerIsDown).
	pc.PackEvents = 10
	pc.Timeout = 10 * time.Second
	prod, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prod.Close() })
	e.prod = prod
	return e
}

func TestClusterIngestKillRetentionReplay(t *testing.T) {
	_, conn, nodes := clusterDB(t)
	e := clusterEnv(t, conn)

	a, aDone := e.clusterSink("live", crashAt(3))
	b, _ := e.clusterSink("live", nil)
	start := time.Now().Add(-time.Hour)
	old := start.AddDate(0, 0, -40)
	e.spread(200, old, time.Second) // expired: for the retention drop below
	want := 0
	for round := range 8 {
		if round == 3 {
			testenv.ClusterScript(t, "kill", "s1r2")
			// Up again whatever happens: an ON CLUSTER statement waits
			// for every server.
			t.Cleanup(func() { testenv.ClusterScript(t, "start", "s1r2") })
		}
		e.spread(500, start.Add(time.Duration(round)*time.Minute), 10*time.Millisecond)
		want += 500
		time.Sleep(200 * time.Millisecond)
	}
	select {
	case err := <-aDone:
		t.Logf("sink a stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("sink a never reached its crash: a %+v, b %+v, a ready %v, b ready %v", a.Stats(), b.Stats(), a.Ready(context.Background()), b.Ready(context.Background()))
	}
	testenv.ClusterScript(t, "start", "s1r2")

	var seen [4]uint64
	waitFor(t, "every event in the Distributed tables", func() bool {
		raw, minute, hour, ids := testenv.RequestLogCounts(t, conn)
		seen = [4]uint64{raw, minute, hour, ids}
		if raw == uint64(want) && minute == uint64(want) && hour == uint64(want) && ids == uint64(want) {
			return true
		}
		t.Logf("want %d: raw, minute, hour, ids %v; a %+v, b %+v, b ready %v", want, seen, a.Stats(), b.Stats(), b.Ready(context.Background()))
		time.Sleep(time.Second)
		return false
	})
	// Every replica of a shard holds the same; the shards add up.
	deadline := time.Now().Add(90 * time.Second)
	for {
		shards := map[int][][4]uint64{}
		for _, n := range clusterNodes {
			shards[n.Shard] = append(shards[n.Shard], replicaCounts(t, nodes[n.Name]))
		}
		s1, s2 := shards[1], shards[2]
		same := s1[0] == s1[1] && s2[0] == s2[1]
		total := s1[0][0] + s2[0][0]
		if same && total == uint64(want) && s1[0] == [4]uint64{s1[0][0], s1[0][0], s1[0][0], s1[0][0]} &&
			s2[0] == [4]uint64{s2[0][0], s2[0][0], s2[0][0], s2[0][0]} {
			if s1[0][0] == 0 || s2[0][0] == 0 {
				t.Fatalf("one shard holds nothing: %v %v (sharding by partition)", s1, s2)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas (raw, minute, hour, day): shard 1 %v, shard 2 %v; want each shard's replicas equal, %d in all", s1, s2, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, n := range clusterNodes {
		o, err := requestlogview.New(nodes[n.Name], time.Now, nil).Overview(context.Background(), 24)
		if err != nil {
			t.Fatal(err)
		}
		if o.TotalRequests != int64(want) {
			t.Errorf("overview through %s: %d requests, want %d", n.Name, o.TotalRequests, want)
		}
	}
	// More than produced would be rows sent twice that only the replicated
	// tables' block dedup kept out (the offset check failed); fewer is an
	// insert that failed after its rows landed (a replica killed
	// mid-insert), which the retry then found held.
	if sa, sb := a.Stats(), b.Stats(); sa.Inserted+sb.Inserted > int64(want+200) {
		t.Errorf("the sinks inserted %d and %d rows, want at most %d in all (expired ones included)", sa.Inserted, sb.Inserted, want+200)
	}

	// A replay: a new group reads the topic from its start; every row is
	// held already.
	r, _ := e.clusterSink("replay", nil)
	waitFor(t, "the replaying group to read the topic", func() bool { return r.Stats().Skipped >= int64(want) })
	testenv.ExactRequestLogs(t, conn, uint64(want))
	if st := r.Stats(); st.Inserted != 0 {
		t.Fatalf("the replaying group inserted %d rows (stats %+v), want 0", st.Inserted, st)
	}
}

// What a batch inserted is in the Distributed tables before its offsets
// are committed (insert_distributed_sync): otherwise a sink taking the
// partition over right after reads an offset check that misses the rows
// still on their way to their shard, and inserts them again.
func TestClusterInsertIsReadableBeforeCommit(t *testing.T) {
	_, conn, _ := clusterDB(t)
	e := clusterEnv(t, conn)
	var batches, behind atomic.Int64
	var seen atomic.Uint64
	e.clusterSink("live", func(s *RequestLogs) error {
		var raw uint64
		if err := conn.QueryRow(context.Background(), "SELECT count() FROM requestlog_raw").Scan(&raw); err != nil {
			return err
		}
		batches.Add(1)
		if int64(raw) < s.Stats().Inserted {
			behind.Add(1)
			seen.Store(raw)
		}
		return nil
	})
	for range 5 {
		e.spread(300, time.Now().Add(-time.Hour), 10*time.Millisecond)
		time.Sleep(300 * time.Millisecond)
	}
	testenv.ExactRequestLogs(t, conn, 1500)
	if n := behind.Load(); n > 0 {
		t.Fatalf("%d of %d batches were not readable between their insert and their commit (read %d rows once)", n, batches.Load(), seen.Load())
	}
}
