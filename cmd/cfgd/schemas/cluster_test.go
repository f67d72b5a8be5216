//go:build cluster

package schemas_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// TestClusterMigrate: on the cluster of deploy/scripts/cluster (make
// test-cluster), `cfgd migrate`'s ClickHouse step creates the local
// replicated tables and the Distributed tables on every node, twice
// without harm.
func TestClusterMigrate(t *testing.T) {
	ctx := context.Background()
	db := fmt.Sprintf("cfgd_cl_%d", time.Now().UnixNano())
	dsn := "clickhouse://" + testenv.ClusterNodeAddr("s1r1") + "/" + db
	t.Cleanup(func() {
		// The replicas' ZooKeeper paths go with the tables.
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{testenv.ClusterNodeAddr("s1r1")}})
		if err == nil {
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" ON CLUSTER "+testenv.ClusterName)
			_ = conn.Close()
		}
	})
	for range 2 {
		if err := schemas.UpClickHouseOn(ctx, dsn, testenv.ClusterName, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range testenv.ClusterNodes() {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{node.Addr()}})
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name LIKE 'requestlog%'", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 11 {
			t.Errorf("node %s: %d tables, want 11 (4 local, 4 distributed, 3 views)", node.Name, n)
		}
		conn.Close()
	}
}
