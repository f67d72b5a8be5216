package requestlogview

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"github.com/cfgd/cfgd/deploy/errcode"
)

// ClickHouse's error codes for a table that is missing: UNKNOWN_TABLE,
// and ALL_CONNECTION_TRIES_FAILED, which a query through a Distributed
// table gets when no replica of a shard has the table it reads (on a
// cluster the swap renames on every node), "There is no table" in its log.
// ALL_REPLICAS_ARE_STALE is the answer when no replica of a shard is
// caught up enough to read (max_replica_delay_for_distributed_queries
// without fallback, set on a cluster: docs/scaling.md).
const (
	unknownTable             = 60
	allConnectionTriesFailed = 279
	allReplicasAreStale      = 369
)

func isUnknownTable(err error) bool {
	var ex *proto.Exception
	if !errors.As(err, &ex) {
		return false
	}
	return ex.Code == unknownTable || ex.Code == allConnectionTriesFailed && strings.Contains(ex.Message, "There is no table")
}

// swapWaits are the waits between attempts of a query that met a missing
// table. They add up to 0.8 s: long enough to cover a replay's RENAME of
// the request-log tables (20-160 ms measured), short enough that a
// database really lacking them still fails quickly.
var swapWaits = [...]time.Duration{20 * time.Millisecond, 80 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// retry runs try until it does not fail on a missing table, waiting
// swapWaits between attempts, and returns the last answer. Every question
// of a Store is asked through it, whole: `cfgd replay
// requestlog.clickhouse` swaps the rebuilt tables in with one RENAME TABLE
// (on a cluster, server by server: every node renames its replicated
// tables at its own moment), which ClickHouse 18.16 carries out one table after
// another, so a question arriving between two of them finds a live name
// missing for a few milliseconds. Through a Distributed table a shard's
// error can arrive after other shards' rows were read: only asking the
// whole question again gives a right answer then.
func retry[T any](ctx context.Context, try func() (T, error)) (T, error) {
	v, err := try()
	for _, d := range swapWaits {
		if !isUnknownTable(err) || !sleep(ctx, d) {
			break
		}
		v, err = try()
	}
	return v, unavailable(err)
}

// unavailable is err, as errcode.Unavailable (a 503 that says to retry
// shortly) when a shard had no replica to read: none answered, none is
// caught up, or each still lacked a table a swap renames. That is a server
// down or catching up, and passes; any other error stays what it was.
func unavailable(err error) error {
	var ex *proto.Exception
	if errors.As(err, &ex) && (ex.Code == allConnectionTriesFailed || ex.Code == allReplicasAreStale) {
		return errcode.Wrap(errcode.Unavailable, errcode.MessageUnavailable, err)
	}
	return err
}

// A replay on a cluster builds its set of tables beside the live one with
// the statements below, and swaps them in by renaming the replicated
// tables on every server: each Distributed table names the table it reads, so
// once the rebuilt replicated tables carry the live names, the live
// Distributed tables read them unchanged.

// ClusterTableDDL returns the statements that create set t on cluster c
// without its materialized views, each ON CLUSTER and idempotent: a
// replicated table (t's name + LocalSuffix) on every node and a
// Distributed table under t's name over them. zk is appended to the
// replicated tables' ZooKeeper paths (empty: the migration's paths). A
// table keeps its path when renamed, so the set a replay renames to the
// live names still holds the path it was created with: each replay's set
// needs paths of its own.
func ClusterTableDDL(t Tables, c Cluster, zk string) ([]string, error) {
	if err := clusterCheck(c, zk); err != nil {
		return nil, err
	}
	d := clusterPlan(t, c)
	// The templates end a replicated table's ZooKeeper path in .Local;
	// the Distributed table still reads the table under its own name.
	path := func(s stmt) stmt { s.Local += zk; return s }
	return render(func(r *renderer) {
		r.add("create_raw", path(d.Raw))
		r.add("create_distributed", d.Raw)
		for _, s := range d.Rollups {
			r.add("create_rollup_offsets", path(s))
			r.add("create_distributed", s)
		}
	})
}

// ClusterViewDDL returns the materialized views of set t on cluster c, ON
// CLUSTER: on every node each feeds its replicated rollup from its
// replicated raw table.
func ClusterViewDDL(t Tables, c Cluster) ([]string, error) {
	if err := clusterCheck(c, ""); err != nil {
		return nil, err
	}
	d := clusterPlan(t, c)
	return render(func(r *renderer) {
		for _, s := range d.Rollups {
			r.add("create_view_offsets", s)
		}
	})
}

// ServerViewDDL is ClusterViewDDL for one server: the same views, each
// statement run on the server it is sent to alone (no ON CLUSTER). A
// replay's swap creates them server by server, so that a server that does
// not answer is retried without holding the others' distributed DDL.
func ServerViewDDL(t Tables, c Cluster) ([]string, error) {
	if err := clusterCheck(c, ""); err != nil {
		return nil, err
	}
	d := clusterPlan(t, c)
	return render(func(r *renderer) {
		for _, s := range d.Rollups {
			s.Cluster = ""
			r.add("create_view_offsets", s)
		}
	})
}

func clusterCheck(c Cluster, zk string) error {
	if !c.On() {
		return fmt.Errorf("request-log schema: no cluster")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	// zk goes into a quoted path unescaped.
	if zk != "" && !plainIdent(zk) {
		return fmt.Errorf("request-log schema: ZooKeeper path suffix %q: want letters, digits and _", zk)
	}
	return nil
}
