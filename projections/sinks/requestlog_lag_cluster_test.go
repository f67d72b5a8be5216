//go:build cluster

package sinks

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// shadowRawLocal is the shadow raw table's replicated table.
var shadowRawLocal = requestlogview.LiveTables().Suffixed(replay.ShadowSuffix).Suffixed(requestlogview.LocalSuffix).Raw

// hookedLoad is a replay that runs begin once its shadow tables exist,
// before the bulk load's first insert, and end after its last one, before
// the rollups are filled from the raw table.
type hookedLoad struct {
	replay.Target
	begin, end   func()
	begun, ended bool
}

func (h *hookedLoad) Shadow(ctx context.Context, progress replay.Progress) error {
	// Progress comes first before the load (0 done), then after each
	// insert, one call at a time.
	return h.Target.Shadow(ctx, func(done, total int64) {
		if !h.begun {
			h.begun = true
			h.begin()
		}
		if done == total && done > 0 && !h.ended {
			h.ended = true
			// On an inserter's goroutine: a t.Fatal in end ends
			// end's own, and the load goes on to fail the test
			// rather than hang.
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				h.end()
			}()
			<-ended
		}
		progress(done, total)
	})
}

// strictConn connects as cmd/cfgd does on a cluster (clusterReads: reads
// through replicas less than a second behind only, no fallback), through
// addrs in order.
func strictConn(t *testing.T, db string, addrs ...string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr: addrs, Auth: clickhouse.Auth{Database: db},
		DialTimeout: time.Second, ConnOpenStrategy: clickhouse.ConnOpenInOrder,
		Settings: requestlogview.CaughtUpReads(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// A replay on a cluster reads back the tables it just wrote (the rollups
// are filled from the raw table) while every replica reports a delay, as
// right after the bulk load on a loaded machine: each replica holds the
// load's inserts queued (the first one its own, as no-ops) until its
// queue runs them. cfgd's connection on a cluster reads through replicas
// less than a second behind only, with no fallback: the fill failed with
// ALL_REPLICAS_ARE_STALE (CI, TestClusterReplayCommand). The replay
// reads its own tables as it inserts, through each shard's first
// replica. Here the queues are stopped for the load and the fill.
func TestClusterReplayFillsWhileEveryReplicaLags(t *testing.T) {
	db, _, nodes := clusterDB(t)
	e := clusterEnv(t, strictConn(t, db, testenv.ClusterNodeAddr("s1r1"), testenv.ClusterNodeAddr("s2r1")))
	e.spread(600, time.Now().Add(-10*time.Minute), 100*time.Millisecond)

	ctx := context.Background()
	queues := func(verb, table string) {
		for _, n := range clusterNodes {
			if err := nodes[n.Name].Exec(ctx, "SYSTEM "+verb+" REPLICATION QUEUES "+table); err != nil {
				t.Errorf("%s replication queues on %s: %v", verb, n.Name, err)
			}
		}
	}
	// Every table's: after the swap the shadow tables have the live names.
	resume := func() { queues("START", "") }
	t.Cleanup(resume)
	lagging := func() error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			n := 0
			var last error
			for _, node := range clusterNodes {
				var delay uint64
				err := nodes[node.Name].QueryRow(ctx, "SELECT toUInt64(absolute_delay) FROM system.replicas WHERE database = currentDatabase() AND table = ?", shadowRawLocal).Scan(&delay)
				if err == nil && delay >= 1 {
					n++
				}
				last = cmp.Or(err, last)
			}
			if n == len(clusterNodes) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of the %d replicas of %s report a delay after 30s (last error %v)", n, len(clusterNodes), shadowRawLocal, last)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	res, err := e.clusterReplay(func(tg replay.Target) replay.Target {
		return &hookedLoad{Target: tg,
			begin: func() { queues("STOP", shadowRawLocal) },
			end: func() {
				if err := lagging(); err != nil {
					t.Error(err)
				}
			}}
	})
	if err != nil {
		t.Fatalf("replay while every replica lags: %v", err)
	}
	if res.Events != 600 || !res.Swapped {
		t.Fatalf("replay: %+v, want 600 events swapped in", res)
	}
	resume()
	everyNodeHolds(t, nodes, 600)
}

// movingConn sends the replay's statements to one server's connection
// until move, then to another's.
type movingConn struct {
	driver.Conn // until move
	moved       atomic.Pointer[driver.Conn]
}

func (c *movingConn) move(to driver.Conn) { c.moved.Store(&to) }

func (c *movingConn) now() driver.Conn {
	if m := c.moved.Load(); m != nil {
		return *m
	}
	return c.Conn
}

func (c *movingConn) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	return c.now().Query(ctx, q, args...)
}

func (c *movingConn) QueryRow(ctx context.Context, q string, args ...any) driver.Row {
	return c.now().QueryRow(ctx, q, args...)
}

func (c *movingConn) Exec(ctx context.Context, q string, args ...any) error {
	return c.now().Exec(ctx, q, args...)
}

func (c *movingConn) PrepareBatch(ctx context.Context, q string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	return c.now().PrepareBatch(ctx, q, opts...)
}

// A shard's first replica (s1r1) killed during a replay's bulk load (the
// load's rows of shard 1 go to s1r2) and back before the fill, reads
// short until it has fetched what it missed, and a query cfgd sends
// through it reads shard 1 there (its local replica). The replay waits
// for it rather than fill the rollups from part of the rows.
func TestClusterReplayWaitsForAReturningReplica(t *testing.T) {
	db, _, nodes := clusterDB(t)
	// Through s2r1 while s1r1 is down, then through s1r1, as cfgd's
	// connection (s1r1 first) dials again.
	conn := &movingConn{Conn: strictConn(t, db, testenv.ClusterNodeAddr("s2r1"))}
	e := clusterEnv(t, conn)
	e.spread(600, time.Now().Add(-10*time.Minute), 100*time.Millisecond)
	t.Cleanup(func() { testenv.ClusterScript(t, "start", "s1r1") })
	var held time.Time
	res, err := e.clusterReplay(func(tg replay.Target) replay.Target {
		return &hookedLoad{Target: tg,
			begin: func() { testenv.ClusterScript(t, "kill", "s1r1") },
			end: func() {
				testenv.ClusterScript(t, "start", "s1r1")
				_, resume := testenv.ClusterHoldFetches(t, db, "s1r1")
				conn.move(strictConn(t, db, testenv.ClusterNodeAddr("s1r1")))
				held = time.Now()
				time.AfterFunc(3*time.Second, resume)
			}}
	})
	if err != nil {
		t.Fatalf("replay with s1r1 back before the fill: %v", err)
	}
	if res.Events != 600 || !res.Swapped {
		t.Fatalf("replay: %+v, want 600 events swapped in", res)
	}
	if waited := time.Since(held); waited < 3*time.Second {
		t.Errorf("the replay ended %v after s1r1's fetches were held, before they were let go", waited)
	}
	everyNodeHolds(t, nodes, 600)
}
