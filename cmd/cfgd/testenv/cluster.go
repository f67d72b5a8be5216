package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ClusterName is the cluster deploy/scripts/cluster/cluster.sh configures.
const ClusterName = "cfgd"

// ClusterNode is one ClickHouse server of that cluster.
type ClusterNode struct {
	Name  string // s1r1, s1r2, s2r1, s2r2
	Shard int
	Port  int // native TCP port
}

// Addr is the node's host:port for the ClickHouse driver.
func (n ClusterNode) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.Port) }

// ClusterNodes lists the cluster's servers, first replica of each shard
// first. Ports follow the script: 9100+i, shifted by
// CFGD_CLUSTER_PORT_SHIFT, so two clusters can run side by side.
func ClusterNodes() []ClusterNode {
	shift, _ := strconv.Atoi(os.Getenv("CFGD_CLUSTER_PORT_SHIFT"))
	return []ClusterNode{
		{"s1r1", 1, 9101 + shift}, {"s1r2", 1, 9102 + shift},
		{"s2r1", 2, 9103 + shift}, {"s2r2", 2, 9104 + shift},
	}
}

// ClusterNodeAddr is the host:port of the named node.
func ClusterNodeAddr(name string) string {
	for _, n := range ClusterNodes() {
		if n.Name == name {
			return n.Addr()
		}
	}
	panic("testenv: no cluster node " + name)
}

// ClusterScript runs deploy/scripts/cluster/cluster.sh with args (kill
// s1r2, start s1r2, ...), with this process's environment, so the port
// shift and data dir are the ones the cluster was started with.
func ClusterScript(t testing.TB, args ...string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "scripts", "cluster", "cluster.sh")
	out, err := exec.Command(script, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("cluster.sh %v: %v\n%s", args, err, out)
	}
}

// ClusterDial opens a connection to one server of the cluster: the
// sinks' Dial (retention drops partitions shard by shard).
func ClusterDial(_ context.Context, addr string) (driver.Conn, error) {
	return clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: time.Second})
}

// ClusterHoldFetches stops the fetches of database db's replicated tables
// on node, a replica just started again after a kill -9 (its ZooKeeper
// session of before the kill keeps it read-only until that times out, so
// it has fetched nothing yet), and waits until it has loaded its
// replication queue: it is then back, answering reads, and behind by what
// it missed. Held fetches stand in for a replica with much to fetch after
// a long outage (the tests' parts are small and fetched within
// milliseconds). It returns a connection to node in db and resume, which
// lets the fetches go (so does the end of t).
func ClusterHoldFetches(t testing.TB, db, node string) (conn driver.Conn, resume func()) {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ClusterNodeAddr(node)}, Auth: clickhouse.Auth{Database: db}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	var tables []string
	rs, err := conn.Query(ctx, "SELECT table FROM system.replicas WHERE database = currentDatabase()")
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var name string
		if err := rs.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rs.Close()
	if err := rs.Err(); err != nil || len(tables) == 0 {
		t.Fatalf("replicated tables of %s on %s: %v %v", db, node, tables, err)
	}
	fetches := func(verb string) error {
		for _, name := range tables {
			if err := conn.Exec(ctx, "SYSTEM "+verb+" FETCHES "+db+"."+name); err != nil {
				return fmt.Errorf("%s fetches of %s on %s: %w", verb, name, node, err)
			}
		}
		return nil
	}
	if err := fetches("STOP"); err != nil {
		t.Fatal(err)
	}
	resume = func() {
		if err := fetches("START"); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { _ = fetches("START") })
	start := time.Now()
	first := ""
	for {
		var readonly, queue, delay uint64
		err := conn.QueryRow(ctx, "SELECT toUInt64(max(is_readonly)), toUInt64(sum(queue_size)), toUInt64(max(absolute_delay)) "+
			"FROM system.replicas WHERE database = currentDatabase()").Scan(&readonly, &queue, &delay)
		if first == "" && err == nil {
			first = fmt.Sprintf("read-only %d, %d entries queued, absolute delay %d s", readonly, queue, delay)
		}
		if err == nil && readonly == 0 && queue > 0 {
			t.Logf("%s active %v after its fetches were held: %d entries queued, absolute delay %d s (when they were held: %s)",
				node, time.Since(start).Round(time.Millisecond), queue, delay, first)
			return conn, resume
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("%s did not load its replication queue within 60s: read-only %d, %d entries queued, err %v", node, readonly, queue, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
