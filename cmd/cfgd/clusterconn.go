package main

import (
	"context"
	"errors"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// ClickHouse's codes for a Distributed query that found no replica of a
// shard to read: none answered, or none is caught up (clusterReads).
const (
	chAllConnectionTriesFailed = 279
	chAllReplicasAreStale      = 369
)

// clusterConn is a connection to a ClickHouse cluster whose reads answer
// a shard without a usable replica as errcode.Unavailable (a 503 that
// says to retry), not as cfgd's own failure: it is a server down or
// catching up, and passes.
type clusterConn struct{ driver.Conn }

func (c clusterConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := c.Conn.Query(ctx, query, args...)
	if err != nil {
		return nil, noReplica(err)
	}
	return clusterRows{rows}, nil
}

func (c clusterConn) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	return clusterRow{c.Conn.QueryRow(ctx, query, args...)}
}

func (c clusterConn) Select(ctx context.Context, dest any, query string, args ...any) error {
	return noReplica(c.Conn.Select(ctx, dest, query, args...))
}

type clusterRows struct{ driver.Rows }

func (r clusterRows) Err() error { return noReplica(r.Rows.Err()) }

type clusterRow struct{ driver.Row }

func (r clusterRow) Err() error                { return noReplica(r.Row.Err()) }
func (r clusterRow) Scan(dest ...any) error    { return noReplica(r.Row.Scan(dest...)) }
func (r clusterRow) ScanStruct(dest any) error { return noReplica(r.Row.ScanStruct(dest)) }

// noReplica is err, as errcode.Unavailable when it says a shard had no
// replica to read.
func noReplica(err error) error {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) && (ex.Code == chAllConnectionTriesFailed || ex.Code == chAllReplicasAreStale) {
		return errcode.Wrap(errcode.Unavailable, errcode.MessageUnavailable, err)
	}
	return err
}
