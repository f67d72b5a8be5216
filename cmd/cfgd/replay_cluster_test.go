//go:build cluster

package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/projections/replay"
)

// With CLICKHOUSE__CLUSTER set, `cfgd replay requestlog.clickhouse` and
// `cfgd replay --all` rebuild the request-log tables of the cluster (make
// test-cluster starts it).
func TestClusterReplayCommand(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	c, _ := clickhouseReplayEnv(t)
	ctx := context.Background()
	db := fmt.Sprintf("cfgd_cluster_cmd_%d", time.Now().UnixNano())
	url := "clickhouse://" + testenv.ClusterNodeAddr("s1r1") + "," + testenv.ClusterNodeAddr("s2r1") + "/" + db
	if err := schemas.UpClickHouseOn(ctx, url, testenv.ClusterName, testenv.Quiet()); err != nil {
		t.Fatal(err)
	}
	var nodes []driver.Conn
	for _, n := range testenv.ClusterNodes() {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{n.Addr()}, Auth: clickhouse.Auth{Database: db}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		nodes = append(nodes, conn)
	}
	t.Cleanup(func() {
		_ = nodes[0].Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" ON CLUSTER "+testenv.ClusterName)
	})
	t.Setenv("CLICKHOUSE__URL", url)
	t.Setenv("CLICKHOUSE__CLUSTER", testenv.ClusterName)

	produceSignedRequestLogs(t, c)

	for _, args := range [][]string{{"replay", replay.RequestLogName}, {"replay", "--all"}} {
		var stdout, stderr bytes.Buffer
		if err := run(ctx, args, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "requestlog.clickhouse: replayed 50 records (500 events") {
			t.Fatalf("%q on a cluster: %v, stderr %q, stdout %q", args, err, stderr.String(), stdout.String())
		}
		// Read through every node: each one's Distributed tables read
		// the rebuilt tables.
		for _, conn := range nodes {
			testenv.ExactRequestLogs(t, conn, 500)
		}
	}
}
