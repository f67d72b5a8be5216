package requestlogview

import (
	"context"
	"errors"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
)

// unknownTable is ClickHouse's UNKNOWN_TABLE error code.
const unknownTable = 60

// swapTolerant asks again when a query names a table that does not exist
// at that instant. `cfgd replay requestlog.clickhouse` swaps the rebuilt
// tables in with one RENAME TABLE, which ClickHouse 18.16 carries out one
// table after another: a query arriving between two of them would find a
// live name missing for a few milliseconds.
type swapTolerant struct{ driver.Conn }

func isUnknownTable(err error) bool {
	var ex *proto.Exception
	return errors.As(err, &ex) && ex.Code == unknownTable
}

// retry runs try until it does not fail on a missing table, waiting
// between attempts, and returns the last answer. The waits add up to
// 0.8 s: long enough to cover a replay's RENAME of the request-log tables
// (20-160 ms measured), short enough that a database really lacking them
// still fails quickly.
func retry[T any](ctx context.Context, try func() (T, error)) (T, error) {
	v, err := try()
	for _, d := range [...]time.Duration{20 * time.Millisecond, 80 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond} {
		if !isUnknownTable(err) {
			break
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(d):
		}
		v, err = try()
	}
	return v, err
}

func (c swapTolerant) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	return retry(ctx, func() (driver.Rows, error) { return c.Conn.Query(ctx, query, args...) })
}

func (c swapTolerant) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	row, _ := retry(ctx, func() (driver.Row, error) {
		r := c.Conn.QueryRow(ctx, query, args...)
		return r, r.Err()
	})
	return row
}
