package requestlog

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Fence orders the sink's writes against a replay swapping rebuilt tables
// in (another process: `cfgd replay requestlog.clickhouse`). The sink
// caches, per partition, the highest offset the raw table holds; after a
// swap that cache describes tables that are gone, so it must be read again
// from the new ones, and no batch may be half written across a swap.
type Fence interface {
	// Shared runs fn while no swap can begin or be under way; gen is the
	// tables' generation, which every swap changes.
	Shared(ctx context.Context, fn func(gen int64) error) error
}

// Advisory lock keys. The replay takes the fence exclusively around its
// catch-up and swap; the sink takes it shared around each batch. The
// "another replay is running" lock follows projections/replay's scheme
// (class "rply", FNV-32a of the projection name), so replays of every
// kind share one key space.
const (
	fenceClass  = 0x726c6f67 // "rlog"
	fenceKey    = 1
	replayClass = 0x72706c79 // "rply"
)

func replayKey() int32 {
	h := fnv.New32a()
	h.Write([]byte(ReplayName))
	return int32(h.Sum32())
}

// PostgresFence is the Fence kept in Postgres: a transaction-level
// advisory lock and the requestlog_generation row (migration 00013).
type PostgresFence struct{ Pool *pgxpool.Pool }

var _ Fence = PostgresFence{}

// Shared takes the lock shared for one transaction, reads the generation
// and runs fn inside it; the lock goes with the transaction.
func (f PostgresFence) Shared(ctx context.Context, fn func(gen int64) error) error {
	return pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1, $2)`, int32(fenceClass), int32(fenceKey)); err != nil {
			return fmt.Errorf("request-log fence: %w", err)
		}
		// A statement of its own: under READ COMMITTED its snapshot is
		// taken after the lock was granted, so it sees the generation a
		// swap that held the lock committed.
		var gen int64
		if err := tx.QueryRow(ctx, `SELECT generation FROM requestlog_generation`).Scan(&gen); err != nil {
			return fmt.Errorf("request-log generation: %w", err)
		}
		return fn(gen)
	})
}
