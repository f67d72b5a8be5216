//go:build cluster

package faults

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// clusterNodeConn connects to the named nodes of the cluster (in order)
// in database db.
func clusterNodeConn(t testing.TB, db string, nodes ...string) driver.Conn {
	t.Helper()
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, testenv.ClusterNodeAddr(n))
	}
	c, err := clickhouse.Open(&clickhouse.Options{Addr: addrs, Auth: clickhouse.Auth{Database: db},
		DialTimeout: time.Second, ConnOpenStrategy: clickhouse.ConnOpenInOrder})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// localCounts is what one node's local tables hold: raw rows and the
// rollups' requests.
func localCounts(ctx context.Context, conn driver.Conn) ([4]uint64, error) {
	var c [4]uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+requestlogview.RawTable+requestlogview.LocalSuffix).Scan(&c[0]); err != nil {
		return c, err
	}
	for i, r := range requestlogview.LiveTables().Rollups() {
		if err := conn.QueryRow(ctx, "SELECT countMerge(requests) FROM "+r+requestlogview.LocalSuffix).Scan(&c[i+1]); err != nil {
			return c, err
		}
	}
	return c, nil
}

// clusterServe is two `cfgd serve` replicas on one `cfgd broker`, one
// Postgres database, one Redis and a database of its own on the
// ClickHouse cluster, each replica reaching the cluster through another
// server first, with an API key for ingest and a staff login for the
// statistics.
type clusterServe struct {
	t        *testing.T
	db       string
	replicas []*cfgd
	key      string
	keyID    int64
	staff    string // Authorization header value
	pgURL    string
}

func newClusterServe(t *testing.T) *clusterServe {
	t.Helper()
	_, busEnv := startBroker(t)
	_, redisURL := startRedis(t)
	cs := &clusterServe{t: t, db: fmt.Sprintf("cfgd_serve_%d", time.Now().UnixNano()), pgURL: testenv.PostgresURL(t)}
	shared := maps.Clone(busEnv)
	shared["POSTGRES__URL"], shared["REDIS__URL"] = cs.pgURL, redisURL
	shared["CLICKHOUSE__CLUSTER"] = testenv.ClusterName
	shared["AUTH__KEYS_DIR"] = filepath.Join(t.TempDir(), "keys")
	first := [][2]string{{"s1r1", "s2r1"}, {"s2r1", "s1r1"}}
	for i, nodes := range first {
		env := maps.Clone(shared)
		env["REPLICA__ID"] = fmt.Sprintf("replica-%d", i)
		env["CLICKHOUSE__URL"] = fmt.Sprintf("clickhouse://%s,%s/%s", testenv.ClusterNodeAddr(nodes[0]), testenv.ClusterNodeAddr(nodes[1]), cs.db)
		cs.replicas = append(cs.replicas, newCfgd(t, env))
	}
	cs.replicas[0].run("migrate")
	t.Cleanup(func() {
		// The replicas' ZooKeeper paths go with the tables.
		_ = clusterNodeConn(t, "default", "s1r1", "s2r1").Exec(context.Background(), "DROP DATABASE IF EXISTS "+cs.db+" ON CLUSTER "+testenv.ClusterName)
	})
	cs.key, cs.keyID = cs.replicas[0].apiKey("cluster@example.com")
	const pw = "cluster stats password"
	cs.replicas[0].run("user", "create-superuser", "--email", "stats@example.com", "--password", pw)
	cs.staff = "Basic " + base64.StdEncoding.EncodeToString([]byte("stats@example.com:"+pw))
	for _, r := range cs.replicas {
		r.start()
		r.waitReady(60 * time.Second)
	}
	return cs
}

// totals reads the overview total through every replica.
func (cs *clusterServe) totals() ([]int64, error) {
	var out []int64
	for i, r := range cs.replicas {
		n, err := r.overview(context.Background(), cs.staff)
		if err != nil {
			return out, fmt.Errorf("replica %d: %w", i, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// waitTotals waits until the overview through every replica says want.
func (cs *clusterServe) waitTotals(want int, timeout time.Duration) time.Duration {
	cs.t.Helper()
	return eventually(cs.t, fmt.Sprintf("the overview through every replica to count %d", want), timeout, func() error {
		got, err := cs.totals()
		if err != nil {
			return err
		}
		for i, n := range got {
			if n != int64(want) {
				return fmt.Errorf("replica %d counts %d", i, n)
			}
		}
		return nil
	})
}

// waitReplicasEqual waits until both replicas of each shard hold the same
// raw rows and rollups, the shards together want events.
func (cs *clusterServe) waitReplicasEqual(want int, timeout time.Duration) (map[string][4]uint64, time.Duration) {
	cs.t.Helper()
	nodes := map[string]driver.Conn{}
	for _, n := range testenv.ClusterNodes() {
		nodes[n.Name] = clusterNodeConn(cs.t, cs.db, n.Name)
	}
	var counts map[string][4]uint64
	took := eventually(cs.t, "both replicas of each shard to hold the same", timeout, func() error {
		counts = map[string][4]uint64{}
		for name, c := range nodes {
			n, err := localCounts(context.Background(), c)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			counts[name] = n
		}
		switch {
		case counts["s1r1"] != counts["s1r2"] || counts["s2r1"] != counts["s2r2"]:
			return fmt.Errorf("replicas differ: %v", counts)
		case counts["s1r1"][0]+counts["s2r1"][0] != uint64(want):
			return fmt.Errorf("shards hold %d, want %d: %v", counts["s1r1"][0]+counts["s2r1"][0], want, counts)
		}
		for name, c := range counts {
			if c != [4]uint64{c[0], c[0], c[0], c[0]} {
				return fmt.Errorf("%s: raw and rollups differ: %v", name, c)
			}
		}
		return nil
	})
	if counts["s1r1"][0] == 0 || counts["s2r1"][0] == 0 {
		cs.t.Errorf("one shard holds nothing: %v", counts)
	}
	return counts, took
}

// ingesters posts batches through each replica.
func (cs *clusterServe) ingesters() []*ingester {
	var ins []*ingester
	for _, r := range cs.replicas {
		ins = append(ins, newIngester(r, cs.key, cs.keyID, 50, 20*time.Millisecond))
	}
	return ins
}

// TestClusterServe runs two `cfgd serve` replicas on the ClickHouse
// cluster (CLICKHOUSE__CLUSTER, migrated by `cfgd migrate`), each reaching
// it through another server first, under request-log ingestion through
// both; kills (-9) a ClickHouse replica (s1r2) and a cfgd replica
// mid-load, restarts both, and checks that the overview read through
// each cfgd replica counts every acknowledged event once, that ClickHouse
// holds each acknowledged request id once, and that both replicas of each
// shard hold the same.
//
// Then the case of a shard's first replica: s1r1 is killed, ingestion
// goes on (to s1r2), s1r1 comes back behind (its fetches held, standing
// in for a long catch-up), and the overview through each cfgd replica,
// read at once, still counts everything: cfgd reads only through replicas
// that are caught up (clusterReads), where a plain Distributed read
// answers short.
func TestClusterServe(t *testing.T) {
	cfgdBinary(t)
	start := time.Now()
	cs := newClusterServe(t)
	t.Logf("broker, migrate and 2 replicas on the cluster ready after %v", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ins := cs.ingesters()
	var waits []func()
	for i, in := range ins {
		waits = append(waits, in.run(ctx, fmt.Sprintf("r%d", i), 2))
	}
	load := ingesters(ins)
	load.waitAcked(t, 20)
	testenv.ClusterScript(t, "kill", "s1r2")
	// Up again whatever happens: an ON CLUSTER statement waits for every
	// server.
	t.Cleanup(func() { testenv.ClusterScript(t, "start", "s1r2") })
	cs.replicas[1].kill()
	load.waitAcked(t, load.acked()+20)
	restarted := time.Now()
	testenv.ClusterScript(t, "start", "s1r2")
	cs.replicas[1].start()
	cs.replicas[1].waitReady(60 * time.Second)
	t.Logf("s1r2 and replica 1 back (%v after their restart)", time.Since(restarted).Round(time.Millisecond))
	load.waitAcked(t, load.acked()+20)
	cancel()
	for _, w := range waits {
		w()
	}

	all := merged(cs.replicas[0], ins)
	// Replica 0 was never killed: each of its posts is in the usage.
	_, _, minUsage := ins[0].counts()
	// Every acknowledged event once, and no more than was sent: a post
	// cut off by the kill of replica 1 may be stored unacknowledged.
	held := all.checkIngested(t, clusterNodeConn(t, cs.db, "s1r1", "s2r1"), openPostgres(t, cs.pgURL), 60*time.Second, minUsage)
	took := cs.waitTotals(held, 60*time.Second)
	totals, err := cs.totals()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acknowledged %d events (%d posts answered 202 of %d made), held %d; counted through replica 0: %d, replica 1: %d; "+
		"both counted them %v after the load stopped (%v after the restarts)", len(all.acked), all.calls, all.attempts, held,
		totals[0], totals[1], took.Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	counts, took := cs.waitReplicasEqual(held, 60*time.Second)
	t.Logf("replicas of each shard equal %v later (%v after s1r2's restart): %v; first phase %v", took.Round(time.Millisecond),
		time.Since(restarted).Round(time.Millisecond), counts, time.Since(start).Round(time.Millisecond))

	// A shard's first replica fails and comes back behind.
	testenv.ClusterScript(t, "kill", "s1r1")
	t.Cleanup(func() { testenv.ClusterScript(t, "start", "s1r1") })
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	more := cs.ingesters()
	waits = waits[:0]
	for i, in := range more {
		waits = append(waits, in.run(ctx, fmt.Sprintf("again%d", i), 1))
	}
	eventually(t, "20 batches acknowledged while s1r1 is down", 60*time.Second, func() error {
		n := 0
		for _, in := range more {
			_, _, calls := in.counts()
			n += calls
		}
		if n < 20 {
			return fmt.Errorf("%d acknowledged", n)
		}
		return nil
	})
	cancel()
	for _, w := range waits {
		w()
	}
	all2 := merged(cs.replicas[0], append(ins, more...))
	_, _, more0 := more[0].counts()
	want := all2.checkIngested(t, clusterNodeConn(t, cs.db, "s2r1"), openPostgres(t, cs.pgURL), 60*time.Second, minUsage+more0)
	cs.waitTotals(want, 60*time.Second)
	testenv.ClusterScript(t, "start", "s1r1")
	s1r1, resume := testenv.ClusterHoldFetches(t, cs.db, "s1r1")
	// Replica 0 restarts now and reaches s1r1 first (its CLICKHOUSE__URL),
	// which reads shard 1 from its own tables. (A server that saw s1r1
	// fail, s2r1 here, counts its errors and prefers s1r2 for a while.)
	cs.replicas[0].logs.mark("restart")
	cs.replicas[0].srv.signal(t, syscall.SIGTERM, 30*time.Second)
	cs.replicas[0].start()
	cs.replicas[0].waitReady(60 * time.Second)
	var plain uint64
	if err := s1r1.QueryRow(context.Background(), "SELECT count() FROM requestlog_raw").Scan(&plain); err != nil {
		t.Fatal(err)
	}
	totals, err = cs.totals()
	t.Logf("s1r1 back and behind: the Distributed table through it counts %d of %d; the overview through the cfgd replicas %v (err %v)", plain, want, totals, err)
	if plain >= uint64(want) {
		t.Fatal("s1r1 was not behind when read: the test did not reach the window it is about")
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range totals {
		if n != int64(want) {
			t.Errorf("overview through replica %d counts %d just after s1r1 came back, want %d", i, n, want)
		}
	}
	// s1r2 fails too: shard 1 has no replica that is caught up, and a
	// read fails (503: retry shortly) rather than answer short.
	testenv.ClusterScript(t, "kill", "s1r2")
	for i, r := range cs.replicas {
		n, err := r.overview(context.Background(), cs.staff)
		t.Logf("s1r1 behind, s1r2 down: overview through replica %d: %d, %v", i, n, err)
		if st := statusError(0); !errors.As(err, &st) || st != http.StatusServiceUnavailable {
			t.Errorf("overview through replica %d with shard 1's caught-up replica down: %d, %v; want a 503", i, n, err)
		}
	}
	testenv.ClusterScript(t, "start", "s1r2")
	resume()
	_, took = cs.waitReplicasEqual(want, 60*time.Second)
	t.Logf("s1r1 caught up %v after its fetches resumed; whole test %v", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
