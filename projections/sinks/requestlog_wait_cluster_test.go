//go:build cluster

package sinks

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
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
