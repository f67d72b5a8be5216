//go:build cluster

package sinks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// Chaos finding 3: TestSinkWaitsForAnInsertLeftRunning on a cluster. The
// insert left running came through another server than the one the next
// owner of the partitions reaches the cluster through (s1r1), and runs on
// s1r1 only as its share for shard 1, an insert into requestlog_raw_local:
// the next owner must wait for it on every server, or it refills the
// rollups the insert's views are about to write. Through s2r2, the
// insert's server writes shard 2's share itself, not to its first replica
// s2r1, which the next owner reads: it must also wait until s2r1 fetched
// the rollups' parts, which come after the raw table's.
func TestClusterSinkWaitsForAnInsertLeftRunningElsewhere(t *testing.T) {
	for _, through := range []string{"s2r1", "s2r2"} {
		t.Run(through, func(t *testing.T) { waitsForInsertThrough(t, through) })
	}
}

func waitsForInsertThrough(t *testing.T, through string) {
	db, conn, nodes := clusterDB(t)
	e := clusterEnv(t, conn)
	ctx := context.Background()
	e.spread(300, time.Now().Add(-time.Hour), 10*time.Millisecond)
	cfg := DefaultRequestLogConfig(e.bus)
	cfg.Group, cfg.Cluster, cfg.Dial = "g", testCluster, testenv.ClusterDial
	cfg.BatchRows, cfg.BatchWait, cfg.MaxBackoff = 300, 50*time.Millisecond, 200*time.Millisecond
	first, err := NewFencedRequestLogs(cfg, conn, PostgresFence{Pool: e.pool}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- first.Run(runCtx) }()
	testenv.ExactRequestLogs(t, conn, 300)
	stop()
	<-done
	held := map[int32]int64{}
	rs, err := conn.Query(ctx, "SELECT kafka_partition, max(kafka_offset) FROM requestlog_raw GROUP BY kafka_partition")
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var p uint16
		var off uint64
		if err := rs.Scan(&p, &off); err != nil {
			t.Fatal(err)
		}
		held[int32(p)] = int64(off)
	}
	rs.Close()
	e.spread(300, time.Now().Add(-time.Hour), 10*time.Millisecond)
	msgs := testenv.ReadTopicUntil(t, e.bus, e.bus.Topic(kafka.TopicRequestLogs), func(got []*sarama.ConsumerMessage) bool {
		n := 0
		for _, m := range got {
			n += recordEvents(m)
		}
		return n >= 600
	}, 30*time.Second)
	left := newBatch()
	for _, m := range msgs {
		if off, ok := held[m.Partition]; ok && m.Offset <= off {
			continue
		}
		left.addDecoded(decode(m, nil, nil))
	}
	if n := left.rows.Len(); n != 300 {
		t.Fatalf("left running: %d rows, want 300", n)
	}
	for _, n := range clusterNodes {
		for i := range 3 { // 9 s: 3 s each, 18.16's most
			slow := fmt.Sprintf("CREATE MATERIALIZED VIEW requestlog_aaa_slow%d ENGINE = Null AS SELECT sleep(3) AS s FROM requestlog_raw_local", i)
			if err := nodes[n.Name].Exec(ctx, slow); err != nil {
				t.Fatal(err)
			}
		}
	}
	elsewhere, err := clickhouse.Open(&clickhouse.Options{Addr: []string{testenv.ClusterNodeAddr(through)}, Auth: clickhouse.Auth{Database: db}})
	if err != nil {
		t.Fatal(err)
	}
	defer elsewhere.Close()
	inserted := make(chan error, 1)
	sync := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
	go func() { inserted <- left.rows.Insert(sync, elsewhere) }()
	waitFor(t, "the insert left running writes its raw rows", func() bool {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM requestlog_raw").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 600
	})
	next, _ := e.clusterSink("g", nil)
	if err := <-inserted; err != nil {
		t.Fatal(err)
	}
	for _, n := range clusterNodes {
		for i := range 3 {
			if err := nodes[n.Name].Exec(ctx, fmt.Sprintf("DROP TABLE requestlog_aaa_slow%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "the next owner passes the batch", func() bool { return next.Stats().Skipped+next.Stats().Inserted >= 300 })
	testenv.ExactRequestLogs(t, conn, 600)
	rollupsMatchRaw(t, conn)
	if st := next.Stats(); st.Refilled != 0 {
		t.Errorf("the next owner refilled rollups the insert left running was writing: %+v", st)
	}
}

// Chaos finding 8 (seed 118196204): an insert through s2r2 failed as the
// server was killed, having written shard 2's share there, raw rows and
// rollups. Back, s2r2 sent its parts to s2r1, the raw table's first; the
// retry read s2r1 (where the inserts go) between the two fetches, found
// the rollups short of the failed range and refilled it, and the fetched
// rollup parts counted it again. Here s2r1 fetches the raw table's part
// but not the rollups' until four seconds after the failed insert: the
// sink must judge the failed range only once s2r1 has fetched them.
func TestClusterSinkWaitsForRollupFetchesBeforeJudgingAFailedInsert(t *testing.T) {
	db, conn, nodes := clusterDB(t)
	e := clusterEnv(t, conn)
	ctx := context.Background()
	through := nodeConn(t, db, "s2r2")
	local := requestlogview.LiveTables().Suffixed(requestlogview.LocalSuffix)
	fetches := func(verb string) {
		for _, r := range []string{local.Minute, local.Hour, local.Day} {
			if err := nodes["s2r1"].Exec(ctx, "SYSTEM "+verb+" FETCHES "+r); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() { fetches("START") })
	started := make(chan struct{})
	var calls int
	s := e.hookedSink(func(ctx context.Context, rows *RequestLogRows) error {
		calls++
		if calls > 1 {
			return rows.Insert(ctx, conn)
		}
		fetches("STOP")
		if err := rows.Insert(ctx, through); err != nil {
			return err
		}
		// The hook runs on the sink's goroutine: poll without t.Fatal.
		for deadline := time.Now().Add(time.Minute); ; {
			var on [2]uint64
			for i, n := range []string{"s2r1", "s2r2"} {
				if err := nodes[n].QueryRow(ctx, "SELECT count() FROM "+local.Raw).Scan(&on[i]); err != nil {
					return err
				}
			}
			if on[0] == on[1] {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("s2r1 holds %d raw rows, s2r2 %d", on[0], on[1])
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Past a second behind, s2r1 is not read for the offsets
		// (heldReads): they come from s2r2, which holds everything.
		time.Sleep(1500 * time.Millisecond)
		go func() {
			time.Sleep(4 * time.Second)
			fetches("START")
			close(started)
		}()
		return errors.New("insert 300 rows: failed to read packet from " + testenv.ClusterNodeAddr("s2r2") + ": read: EOF")
	})
	e.spread(300, time.Now().Add(-time.Hour), 10*time.Millisecond)
	waitFor(t, "the sink passes the batch", func() bool { return s.Stats().Skipped+s.Stats().Inserted >= 300 })
	<-started
	waitFor(t, "s2r1 fetches the rollups' parts", func() bool {
		return replicaCounts(t, nodes["s2r1"]) == replicaCounts(t, nodes["s2r2"])
	})
	testenv.ExactRequestLogs(t, conn, 300)
	rollupsMatchRaw(t, conn)
	if st := s.Stats(); st.Refilled != 0 {
		t.Errorf("the sink refilled rollups whose parts s2r1 had still to fetch: %+v", st)
	}
}

// Chaos finding 9 (seed 946524311): serve-1's sink, after an insert failed
// while ZooKeeper was down, waited for a moment when no insert into the raw
// table ran on any server and no replica had a part to fetch; serve-0's
// sink ingested at full rate meanwhile, and no such moment came: the batch
// failed after a minute, again and again, and serve-1 stayed not ready.
// Here inserts of four seconds into a partition the sink does not read
// overlap without a gap, through s2r2 (so s2r1 fetches their parts), while
// the sink retries a failed insert: it must wait for what ran before it
// began to wait, not for a quiet cluster.
func TestClusterSinkWaitsOnlyForWhatRanBeforeIt(t *testing.T) {
	db, conn, nodes := clusterDB(t)
	e := clusterEnv(t, conn)
	ctx := context.Background()
	other := nodeConn(t, db, "s2r2")
	slow := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1, "max_block_size": 1}))
	const otherPartition = 9 // the topic has four
	ingest := `INSERT INTO requestlog_raw (id, kafka_partition, kafka_offset, created_at, created_ms, request_id, service_name, method_name,
		status, duration_ms, grpc_status_code, error_message, client_ip, user_id, username, is_authenticated, api_key_id, api_key_name)
		SELECT 1000000000000 + %[1]d * 10 + number, %[2]d, %[1]d * 10 + number, now() - 3600, 0, '', 'other', 'Sink', 'success', 1, 'OK', '', '', 0, '', 0, 0, ''
		FROM numbers(4) WHERE NOT ignore(sleep(1))`
	var started atomic.Int64
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(g) * 2 * time.Second)
			for {
				select {
				case <-quit:
					return
				default:
				}
				if err := other.Exec(slow, fmt.Sprintf(ingest, started.Add(1), otherPartition)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	stopOther := func() { close(quit); wg.Wait() }
	defer func() {
		select {
		case <-quit:
		default:
			stopOther()
		}
	}()
	waitFor(t, "both other inserts run", func() bool { return started.Load() >= 2 })

	var calls int
	s := e.hookedSink(func(ctx context.Context, rows *RequestLogRows) error {
		calls++
		if err := rows.Insert(ctx, conn); err != nil || calls > 1 {
			return err
		}
		return errors.New("insert 300 rows: code: 999, message: Session expired")
	})
	e.spread(300, time.Now().Add(-time.Hour), 10*time.Millisecond)
	began := time.Now()
	deadline := began.Add(45 * time.Second) // waitInserts gives up after a minute
	for s.Stats().Skipped+s.Stats().Inserted < 300 {
		if time.Now().After(deadline) {
			t.Fatalf("the sink did not pass its batch in 45 s while other inserts ran: %+v", s.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("batch passed after %v, %d other inserts begun", time.Since(began).Round(time.Millisecond), started.Load())
	stopOther()
	waitFor(t, "every replica fetched every part", func() bool {
		return replicaCounts(t, nodes["s1r1"]) == replicaCounts(t, nodes["s1r2"]) && replicaCounts(t, nodes["s2r1"]) == replicaCounts(t, nodes["s2r2"])
	})
	var ours, ids uint64
	if err := conn.QueryRow(ctx, "SELECT count(), uniqExact(id) FROM requestlog_raw WHERE kafka_partition != ?", otherPartition).Scan(&ours, &ids); err != nil {
		t.Fatal(err)
	}
	if ours != 300 || ids != 300 {
		t.Errorf("the sink's partitions hold %d rows, %d ids; want 300", ours, ids)
	}
	rollupsMatchRaw(t, conn)
}

// nodeConn connects to one node of the cluster, in database db.
func nodeConn(t *testing.T, db, node string) driver.Conn {
	t.Helper()
	c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{testenv.ClusterNodeAddr(node)}, Auth: clickhouse.Auth{Database: db}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// hookedSink runs a sink of group g on e's database of the cluster whose
// inserts go through insert (the test's hook), until the test ends.
func (e *replayEnv) hookedSink(insert func(ctx context.Context, rows *RequestLogRows) error) *RequestLogs {
	e.t.Helper()
	cfg := DefaultRequestLogConfig(e.bus)
	cfg.Group, cfg.Cluster, cfg.Dial = "g", testCluster, testenv.ClusterDial
	cfg.BatchRows, cfg.BatchWait, cfg.MaxBackoff = 300, 50*time.Millisecond, 200*time.Millisecond
	s, err := NewFencedRequestLogs(cfg, e.conn, PostgresFence{Pool: e.pool}, testenv.Quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	s.insert = insert
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	e.t.Cleanup(func() { stop(); <-done })
	return s
}
