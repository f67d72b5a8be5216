//go:build cluster

package sinks

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// clusterReplayWith is clusterReplay with tune applied to its config.
func (e *replayEnv) clusterReplayWith(tune func(*replay.ClickHouseConfig)) (replay.Result, error) {
	e.t.Helper()
	cfg := replay.DefaultClickHouseConfig(e.bus)
	cfg.BatchRows = 1000
	cfg.Cluster = testCluster
	cfg.Dial = testenv.ClusterDial
	tune(&cfg)
	t, err := replay.NewClickHouse(cfg, e.conn, e.pool, RequestLogCodec{})
	if err != nil {
		return replay.Result{}, err
	}
	return replay.Rebuild(context.Background(), e.pool, t, nil)
}

// failingExec is a connection to one server whose statements fail while
// fail says so: a ZooKeeper session expiring in the middle of a swap.
type failingExec struct {
	driver.Conn
	fail func(query string) bool
}

func (c failingExec) Exec(ctx context.Context, query string, args ...any) error {
	if c.fail(query) {
		return errors.New("code: 999, message: Coordination::Exception: Session expired (Session expired) (injected)")
	}
	return c.Conn.Exec(ctx, query, args...)
}

// dialFailing dials the cluster's servers, node's with fail injected.
func dialFailing(node string, fail func(query string) bool) requestlogview.Dialer {
	return func(ctx context.Context, addr string) (driver.Conn, error) {
		conn, err := testenv.ClusterDial(ctx, addr)
		if err != nil || addr != testenv.ClusterNodeAddr(node) {
			return conn, err
		}
		return failingExec{Conn: conn, fail: fail}, nil
	}
}

// halfSwapped checks the sink waits, saying what to run, and writes
// nothing (want rows so far) while a swap is half done.
func halfSwapped(t *testing.T, e *replayEnv, s *RequestLogs, want int64) {
	t.Helper()
	e.spread(100, time.Now().Add(-time.Minute), 10*time.Millisecond)
	waitFor(t, "the sink to report the missing views", func() bool {
		err := s.Ready(context.Background())
		return err != nil && strings.Contains(err.Error(), "cfgd replay "+replay.RequestLogName)
	})
	if st := s.Stats(); st.Inserted != want {
		t.Fatalf("the sink wrote into a half-swapped set: %+v", st)
	}
}

// swapFinished checks every node holds the live set alone with want rows,
// the views feeding it, the statistics equal to what the raw rows give,
// and the sink ready.
func swapFinished(t *testing.T, db string, conn driver.Conn, nodes map[string]driver.Conn, s *RequestLogs, want int) {
	t.Helper()
	liveSetOnly(t, db, nodes)
	waitFor(t, "the sink to be ready again", func() bool { return s.Ready(context.Background()) == nil })
	everyNodeHolds(t, nodes, want)
	rollupsMatchRaw(t, conn)
}

// Chaos finding 7 (seed 21): a swap on a cluster stopped on one server
// in the middle of its RENAME (ZooKeeper's session expired): there only
// the raw table had become __old, the three other servers had swapped
// everything, the views were gone everywhere. The next replay finished
// that swap before its own rebuild, where it used to fail for good on
// "Replica ... already exists" (re-creating the live raw table on that
// server under the ZooKeeper path its __old table keeps).
func TestClusterReplayFinishesASwapHalfDoneByHand(t *testing.T) {
	db, conn, nodes := clusterDB(t)
	e := clusterEnv(t, conn)
	ctx := context.Background()
	s, _ := e.clusterSink("live", nil)
	e.spread(1000, time.Now().Add(-20*time.Minute), 100*time.Millisecond)
	waitFor(t, "the sink to write every event", func() bool { return s.Stats().Inserted == 1000 })
	liveSetOnly(t, db, nodes)

	// A rebuild, then its swap by hand as far as the chaos run got.
	if _, err := e.clusterReplay(func(t replay.Target) replay.Target { return killedBeforeSwap{t} }); err == nil {
		t.Fatal("the killed replay succeeded")
	}
	if _, err := e.pool.Exec(ctx, `UPDATE requestlog_generation SET generation = generation + 1`); err != nil {
		t.Fatal(err)
	}
	live, shadow := requestlogview.LiveTables(), requestlogview.LiveTables().Suffixed(replay.ShadowSuffix)
	for _, v := range append(live.Views(), shadow.Views()...) {
		if err := conn.Exec(ctx, "DROP TABLE "+db+"."+v+" ON CLUSTER "+testCluster); err != nil {
			t.Fatal(err)
		}
	}
	liveLocal := live.Suffixed(requestlogview.LocalSuffix).All()
	shadowLocal := shadow.Suffixed(requestlogview.LocalSuffix).All()
	oldLocal := live.Suffixed(replay.OldSuffix).Suffixed(requestlogview.LocalSuffix).All()
	for _, n := range clusterNodes {
		renames := []string{db + "." + liveLocal[0] + " TO " + db + "." + oldLocal[0]}
		if n.Name != "s2r2" {
			renames = nil
			for i := range liveLocal {
				renames = append(renames, db+"."+liveLocal[i]+" TO "+db+"."+oldLocal[i], db+"."+shadowLocal[i]+" TO "+db+"."+liveLocal[i])
			}
		}
		if err := nodes[n.Name].Exec(ctx, "RENAME TABLE "+strings.Join(renames, ", ")); err != nil {
			t.Fatal(err)
		}
	}
	halfSwapped(t, e, s, 1000)

	res, err := e.clusterReplay(nil)
	if err != nil {
		t.Fatalf("replay after a swap half done: %v", err)
	}
	if !res.Resumed || !res.Swapped || res.Events != 1100 {
		t.Fatalf("replay after a swap half done: %+v, want the swap finished, then 1100 events swapped in", res)
	}
	swapFinished(t, db, conn, nodes, s, 1100)
}

// A swap that fails on one server after renaming some of its tables
// (again and again, past SwapPatience) keeps the rebuilt tables, tells to
// run the replay again, and that run finishes the swap; one that fails a
// few times only is finished by the same run.
func TestClusterReplaySwapFailingOnAServerIsFinished(t *testing.T) {
	db, conn, nodes := clusterDB(t)
	e := clusterEnv(t, conn)
	s, _ := e.clusterSink("live", nil)
	e.spread(1000, time.Now().Add(-20*time.Minute), 100*time.Millisecond)
	waitFor(t, "the sink to write every event", func() bool { return s.Stats().Inserted == 1000 })
	liveSetOnly(t, db, nodes)

	minuteRename := "RENAME TABLE " + db + "." + requestlogview.MinuteTable + requestlogview.LocalSuffix + " "
	res, err := e.clusterReplayWith(func(c *replay.ClickHouseConfig) {
		c.SwapPatience = 2 * time.Second
		c.Dial = dialFailing("s2r2", func(q string) bool { return strings.HasPrefix(q, minuteRename) })
	})
	if err == nil || res.Swapped || !strings.Contains(err.Error(), "run `cfgd replay "+replay.RequestLogName+"` again") {
		t.Fatalf("replay whose swap fails on s2r2: %+v, %v", res, err)
	}
	// s2r2 swapped its raw table, not the rollups: their rebuilt tables
	// are kept for the next run.
	got := tablesOn(t, nodes["s2r2"], db)
	for _, want := range []string{requestlogview.RawTable + replay.OldSuffix + requestlogview.LocalSuffix,
		requestlogview.MinuteTable + replay.ShadowSuffix + requestlogview.LocalSuffix} {
		if !slices.Contains(got, want) {
			t.Fatalf("tables on s2r2 after the failed swap: %v, want %s among them", got, want)
		}
	}
	halfSwapped(t, e, s, 1000)

	if res, err = e.clusterReplay(nil); err != nil {
		t.Fatalf("replay after a failed swap: %v", err)
	}
	if !res.Resumed || !res.Swapped || res.Events != 1100 {
		t.Fatalf("replay after a failed swap: %+v, want the swap finished, then 1100 events swapped in", res)
	}
	swapFinished(t, db, conn, nodes, s, 1100)

	// Two failed renames on s2r2: the swap asks again and finishes.
	var fails atomic.Int32
	res, err = e.clusterReplayWith(func(c *replay.ClickHouseConfig) {
		c.Dial = dialFailing("s2r2", func(q string) bool { return strings.HasPrefix(q, minuteRename) && fails.Add(1) <= 2 })
	})
	if err != nil || res.Resumed || !res.Swapped || fails.Load() < 3 {
		t.Fatalf("replay whose swap fails twice on s2r2: %+v, %v (%d renames tried)", res, err, fails.Load())
	}
	swapFinished(t, db, conn, nodes, s, 1100)
}
