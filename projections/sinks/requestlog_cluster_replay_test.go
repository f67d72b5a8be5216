//go:build cluster

package sinks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// clusterReplay rebuilds the request-log tables of the cluster database
// conn reaches, as `cfgd replay requestlog.clickhouse` with
// CLICKHOUSE__CLUSTER does; wrap (if not nil) wraps its target.
func (e *replayEnv) clusterReplay(wrap func(replay.Target) replay.Target) (replay.Result, error) {
	e.t.Helper()
	cfg := replay.DefaultClickHouseConfig(e.bus)
	cfg.BatchRows = 1000
	cfg.Cluster = testCluster
	cfg.Dial = testenv.ClusterDial
	t, err := replay.NewClickHouse(cfg, e.conn, e.pool, RequestLogCodec{})
	if err != nil {
		return replay.Result{}, err
	}
	var target replay.Target = t
	if wrap != nil {
		target = wrap(t)
	}
	return replay.Rebuild(context.Background(), e.pool, target, nil)
}

// killedBeforeSwap is a replay whose process dies once its tables are
// built: the swap never starts, and nothing is dropped.
type killedBeforeSwap struct{ replay.Target }

func (k killedBeforeSwap) Swap(ctx context.Context) error {
	dead, cancel := context.WithCancel(ctx)
	cancel()
	// Stops the reader; with its context done it takes no fence.
	_ = k.Target.Swap(dead)
	return errors.New("killed between build and swap")
}

func (killedBeforeSwap) Drop(context.Context) error { return nil }

// replicaPaths are the ZooKeeper paths of db's replicated tables on node,
// by table.
func replicaPaths(t *testing.T, node driver.Conn, db string) map[string]string {
	t.Helper()
	rows, err := node.Query(context.Background(), "SELECT table, zookeeper_path FROM system.replicas WHERE database = ?", db)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var table, path string
		if err := rows.Scan(&table, &path); err != nil {
			t.Fatal(err)
		}
		out[table] = path
	}
	return out
}

// tablesOn are db's request-log tables and views on node, sorted.
func tablesOn(t *testing.T, node driver.Conn, db string) []string {
	t.Helper()
	rows, err := node.Query(context.Background(), "SELECT name FROM system.tables WHERE database = ? AND name LIKE 'requestlog%' ORDER BY name", db)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// zooKeeperTables are the tables ZooKeeper holds under db for shard.
func zooKeeperTables(t *testing.T, node driver.Conn, db string, shard int) []string {
	t.Helper()
	rows, err := node.Query(context.Background(), fmt.Sprintf("SELECT name FROM system.zookeeper WHERE path = '/clickhouse/tables/%d/%s' ORDER BY name", shard, db))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// liveSetOnly checks that every node holds the live set alone (no table
// of a replay left), its Distributed tables reading the replicated tables
// under the live names, and that ZooKeeper holds the paths of those
// replicated tables and no others. It returns the paths.
func liveSetOnly(t *testing.T, db string, nodes map[string]driver.Conn) map[string]string {
	t.Helper()
	live := requestlogview.LiveTables()
	local := live.Suffixed(requestlogview.LocalSuffix)
	want := slices.Sorted(slices.Values(append(append(live.All(), local.All()...), live.Views()...)))
	var paths map[string]string
	for _, n := range clusterNodes {
		if got := tablesOn(t, nodes[n.Name], db); !slices.Equal(got, want) {
			t.Errorf("tables on %s: %v, want %v", n.Name, got, want)
		}
		for i, d := range live.All() {
			var engine string
			if err := nodes[n.Name].QueryRow(context.Background(), "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?", db, d).Scan(&engine); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(engine, ", "+local.All()[i]+",") {
				t.Errorf("%s on %s: %s, want it to read %s", d, n.Name, engine, local.All()[i])
			}
		}
		p := replicaPaths(t, nodes[n.Name], db)
		if len(p) != 4 {
			t.Errorf("replicated tables on %s: %v", n.Name, p)
		}
		if n.Shard == 1 {
			paths = p
		}
		var leaves []string
		for _, path := range p {
			leaves = append(leaves, path[strings.LastIndex(path, "/")+1:])
		}
		slices.Sort(leaves)
		if zk := zooKeeperTables(t, nodes[n.Name], db, n.Shard); !slices.Equal(zk, leaves) {
			t.Errorf("ZooKeeper holds %v for shard %d, want the live tables' %v alone", zk, n.Shard, leaves)
		}
	}
	return paths
}

// everyNodeHolds waits until each shard's replicas hold the same rows and
// rollups, the shards want rows in all, and the statistics read through
// every node say want.
func everyNodeHolds(t *testing.T, nodes map[string]driver.Conn, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		shards := map[int][][4]uint64{}
		for _, n := range clusterNodes {
			shards[n.Shard] = append(shards[n.Shard], replicaCounts(t, nodes[n.Name]))
		}
		ok := true
		var total uint64
		for _, s := range shards {
			c := s[0]
			ok = ok && s[1] == c && c == [4]uint64{c[0], c[0], c[0], c[0]} && c[0] > 0
			total += c[0]
		}
		if ok && total == uint64(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas (raw, minute, hour, day): %v; want each shard's replicas equal, %d in all", shards, want)
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
}

// A replay on a cluster builds a new set of replicated tables on every
// node beside the live one, swaps it in on every node (the Distributed
// tables and the views then read it) and drops the old set with its
// ZooKeeper paths, so a second replay works too; the sink goes on writing
// into the new set.
func TestClusterReplaySwapsEveryNode(t *testing.T) {
	db, conn, nodes := clusterDB(t)
	e := clusterEnv(t, conn)
	s, _ := e.clusterSink("live", nil)
	start := time.Now().Add(-30 * time.Minute)
	e.spread(2000, start, 100*time.Millisecond)
	waitFor(t, "the sink to write every event", func() bool { return s.Stats().Inserted == 2000 })
	before := liveSetOnly(t, db, nodes)

	want := 2000
	for round := range 2 {
		res, err := e.clusterReplay(nil)
		if err != nil {
			t.Fatalf("replay %d: %v", round+1, err)
		}
		if res.Events != int64(want) || !res.Swapped {
			t.Fatalf("replay %d: %+v, want %d events swapped in", round+1, res, want)
		}
		t.Logf("replay %d of %d events (%d records) on the cluster: %v (load %v, rollups %v)",
			round+1, res.Events, res.Records, res.Elapsed, res.Load, res.Rollups)
		after := liveSetOnly(t, db, nodes)
		for table, path := range after {
			if path == before[table] {
				t.Errorf("replay %d: %s still at %s: not swapped", round+1, table, path)
			}
		}
		before = after
		everyNodeHolds(t, nodes, want)
		// The sink writes into the new set: its views feed the new
		// rollups on every node.
		e.spread(300, time.Now().Add(-time.Minute), 10*time.Millisecond)
		want += 300
		waitFor(t, "the sink to write into the new tables", func() bool { return s.Stats().Inserted+s.Stats().Skipped >= int64(want) })
		everyNodeHolds(t, nodes, want)
	}
	if st := s.Stats(); st.Inserted != int64(want) {
		t.Fatalf("the sink inserted %d rows, want %d (stats %+v)", st.Inserted, want, st)
	}
}

// A replay killed once its tables are built leaves the live set serving
// and the sink writing into it; one killed inside its swap (after the
// RENAME, before the views) leaves a sink that waits and says what to
// run; each time the next replay cleans up and completes.
func TestClusterReplayKilledThenRunAgain(t *testing.T) {
	db, conn, nodes := clusterDB(t)
	e := clusterEnv(t, conn)
	ctx := context.Background()
	s, _ := e.clusterSink("live", nil)
	e.spread(1000, time.Now().Add(-20*time.Minute), 100*time.Millisecond)
	waitFor(t, "the sink to write every event", func() bool { return s.Stats().Inserted == 1000 })
	liveSetOnly(t, db, nodes)
	kill := func(t replay.Target) replay.Target { return killedBeforeSwap{t} }
	shadowLocal := requestlogview.LiveTables().Suffixed(replay.ShadowSuffix).Suffixed(requestlogview.LocalSuffix)

	// Killed between build and swap.
	if _, err := e.clusterReplay(kill); err == nil {
		t.Fatal("the killed replay succeeded")
	}
	for _, n := range clusterNodes {
		if got := tablesOn(t, nodes[n.Name], db); !slices.Contains(got, shadowLocal.Raw) {
			t.Fatalf("no built set on %s after the kill: %v", n.Name, got)
		}
		// The migration's path: the live set is still the first one.
		if p := replicaPaths(t, nodes[n.Name], db); !strings.HasSuffix(p[requestlogview.RawTable+requestlogview.LocalSuffix], "/"+requestlogview.RawTable+requestlogview.LocalSuffix) {
			t.Fatalf("the live raw table on %s moved: %v", n.Name, p)
		}
	}
	e.spread(200, time.Now().Add(-time.Minute), 10*time.Millisecond)
	waitFor(t, "the sink to write into the live set", func() bool { return s.Stats().Inserted == 1200 })
	everyNodeHolds(t, nodes, 1200)
	if _, err := e.clusterReplay(nil); err != nil {
		t.Fatalf("replay after a killed one: %v", err)
	}
	liveSetOnly(t, db, nodes)
	everyNodeHolds(t, nodes, 1200)

	// Killed inside its swap: the generation bumped, the views dropped
	// and the tables renamed on every node, the views not yet created.
	if _, err := e.clusterReplay(kill); err == nil {
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
	var renames []string
	old := live.Suffixed(replay.OldSuffix).Suffixed(requestlogview.LocalSuffix).All()
	for i, l := range live.Suffixed(requestlogview.LocalSuffix).All() {
		renames = append(renames, db+"."+l+" TO "+db+"."+old[i], db+"."+shadowLocal.All()[i]+" TO "+db+"."+l)
	}
	if err := conn.Exec(ctx, "RENAME TABLE "+strings.Join(renames, ", ")+" ON CLUSTER "+testCluster); err != nil {
		t.Fatal(err)
	}
	e.spread(100, time.Now().Add(-time.Minute), 10*time.Millisecond)
	waitFor(t, "the sink to report the missing views", func() bool {
		err := s.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "cfgd replay "+replay.RequestLogName)
	})
	if st := s.Stats(); st.Inserted != 1200 {
		t.Fatalf("the sink wrote into tables without views: %+v", st)
	}
	if _, err := e.clusterReplay(nil); err != nil {
		t.Fatalf("replay after one killed in its swap: %v", err)
	}
	liveSetOnly(t, db, nodes)
	waitFor(t, "the sink to be ready again", func() bool { return s.Ready(ctx) == nil })
	everyNodeHolds(t, nodes, 1300)
}

// A replay on a cluster runs every DDL statement ON CLUSTER, which waits
// for every server: while one is down it is refused at once, saying why,
// and once the server is back it runs.
func TestClusterReplayRefusedWhileAServerIsDown(t *testing.T) {
	_, conn, nodes := clusterDB(t)
	e := clusterEnv(t, conn)
	e.spread(300, time.Now().Add(-10*time.Minute), 100*time.Millisecond)
	active := func() uint8 {
		var n uint8
		if err := nodes["s1r1"].QueryRow(context.Background(), "SELECT active_replicas FROM system.replicas WHERE database = currentDatabase() AND table = ?",
			requestlogview.RawTable+requestlogview.LocalSuffix).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.ClusterScript(t, "kill", "s1r2")
	t.Cleanup(func() { testenv.ClusterScript(t, "start", "s1r2") })
	// ZooKeeper notices once the killed server's session expires.
	waitFor(t, "s1r2 to be inactive", func() bool { return active() == 1 })
	start := time.Now()
	if _, err := e.clusterReplay(nil); err == nil || !strings.Contains(err.Error(), "needs every server") {
		t.Fatalf("replay with s1r2 down: %v", err)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Errorf("the refusal took %v", waited)
	}
	testenv.ClusterScript(t, "start", "s1r2")
	waitFor(t, "s1r2 to be active", func() bool { return active() == 2 })
	if res, err := e.clusterReplay(nil); err != nil || res.Events != 300 {
		t.Fatalf("replay with every server up: %+v, %v", res, err)
	}
	everyNodeHolds(t, nodes, 300)
}

// On a cluster a query through a Distributed table whose replicated table
// both replicas of a shard are renaming at that moment (the swap, ON
// CLUSTER) fails with "All connection tries failed ... There is no
// table": the read model asks again, as it does for a missing table on one
// server.
func TestClusterQueriesRideOutASwap(t *testing.T) {
	_, conn, nodes := clusterDB(t)
	e := clusterEnv(t, conn)
	e.clusterSink("live", nil)
	e.spread(400, time.Now().Add(-10*time.Minute), 100*time.Millisecond)
	testenv.ExactRequestLogs(t, conn, 400)
	ctx := context.Background()
	raw := requestlogview.RawTable + requestlogview.LocalSuffix
	rename := func(from, to string) {
		t.Helper()
		for _, n := range clusterNodes {
			if n.Shard != 2 {
				continue
			}
			if err := nodes[n.Name].Exec(ctx, "RENAME TABLE "+from+" TO "+to); err != nil {
				t.Fatal(err)
			}
		}
	}
	store := requestlogview.New(conn, time.Now, nil)
	rename(raw, raw+"_moving")
	// A row (QueryRow) and a list (Query): both meet the shard's error
	// only when they read their answer.
	done := make(chan error, 2)
	go func() {
		_, count, err := store.Requests(ctx, requestlogview.Filter{})
		if err == nil && count != 400 {
			err = fmt.Errorf("requests: count %d, want 400", count)
		}
		done <- err
	}()
	go func() {
		callers, err := store.Callers(ctx, requestlogview.BreakdownFilter{Hours: 1})
		var n int64
		for _, c := range callers {
			n += c.TotalRequests
		}
		if err == nil && n != 400 {
			err = fmt.Errorf("callers: %d requests, want 400", n)
		}
		done <- err
	}()
	time.Sleep(150 * time.Millisecond) // the queries have met the missing table by now
	rename(raw+"_moving", raw)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("query across the swap: %v", err)
		}
	}
}

// BenchmarkClusterReplay measures a replay on the test cluster:
// CFGD_BENCH_REPLAY_EVENTS (default 1,000,000) request-log events, 512 a
// record on four partitions, rebuilt into a new set of tables on every
// node and swapped in, once per round.
//
//	go test -tags cluster -run '^$' -bench BenchmarkClusterReplay -benchtime 1x -timeout 30m ./projections/sinks/
func BenchmarkClusterReplay(b *testing.B) {
	total := 1_000_000
	if s := os.Getenv("CFGD_BENCH_REPLAY_EVENTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("CFGD_BENCH_REPLAY_EVENTS=%q: want a positive count", s)
		}
		total = n
	}
	ctx := context.Background()
	db := fmt.Sprintf("cfgd_cluster_bench_%d", time.Now().UnixNano())
	addrs := []string{testenv.ClusterNodeAddr("s1r1"), testenv.ClusterNodeAddr("s2r1")}
	if err := schemas.UpClickHouseOn(ctx, "clickhouse://"+strings.Join(addrs, ",")+"/"+db, testCluster, testenv.Quiet()); err != nil {
		b.Fatal(err)
	}
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: addrs, Auth: clickhouse.Auth{Database: db}, ConnOpenStrategy: clickhouse.ConnOpenInOrder})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" ON CLUSTER "+testCluster)
		_ = conn.Close()
	}()
	bus := testenv.Kafka(b, 4)
	pc := requestlogkafka.DefaultProducerConfig(bus)
	pc.PackEvents = 512
	pc.Timeout = 30 * time.Second
	prod, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	var seq atomic.Int64
	from := time.Now().Add(-24 * time.Hour)
	step := 24 * time.Hour / time.Duration(total)
	for i := 0; i < total; i += 51_200 {
		n := min(51_200, total-i)
		if err := prod.Produce(ctx, testenv.RequestLogSpread(&seq, n, from.Add(time.Duration(i)*step), step)); err != nil {
			b.Fatal(err)
		}
	}
	pool := testenv.Postgres(b)
	cfg := replay.DefaultClickHouseConfig(bus)
	cfg.Cluster = testCluster
	cfg.Dial = testenv.ClusterDial
	b.ResetTimer()
	for range b.N {
		target, err := replay.NewClickHouse(cfg, conn, pool, RequestLogCodec{})
		if err != nil {
			b.Fatal(err)
		}
		res, err := replay.Rebuild(ctx, pool, target, nil)
		if err != nil {
			b.Fatal(err)
		}
		if res.Events != int64(total) {
			b.Fatalf("replayed %d events, want %d", res.Events, total)
		}
		b.Logf("%s: %d events (%d records) in %v (raw load %v, rollups %v): %.0f events/s",
			db, res.Events, res.Records, res.Elapsed.Round(time.Millisecond), res.Load.Round(time.Millisecond), res.Rollups.Round(time.Millisecond),
			float64(res.Events)/res.Elapsed.Seconds())
	}
}
