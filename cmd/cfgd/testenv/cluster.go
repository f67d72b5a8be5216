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
