package replay

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresFence orders a live ClickHouse sink's writes against a replay
// swapping rebuilt tables in (another process: `cfgd replay
// requestlog.clickhouse`). The sink caches, per partition, the highest
// offset the raw table holds; after a swap that cache describes tables
// that are gone, so it must be read again from the new ones, and no batch
// may be half written across a swap. The sink takes the fence shared
// around each batch (Shared), the replay exclusively around its catch-up
// and swap (hold); both are one transaction-level advisory lock, and the
// requestlog_generation row (migration 00013) is what every swap changes.
type PostgresFence struct{ Pool *pgxpool.Pool }

// The fence's advisory lock key: class "rlog", key 1.
const (
	fenceClass = 0x726c6f67
	fenceKey   = 1
)

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

// hold takes the lock exclusively in a transaction of its own, waiting for
// the sink's batch in flight (new ones wait behind it). Whatever ends the
// transaction (commit, rollback, the process dying) releases it.
func (f PostgresFence) hold(ctx context.Context) (pgx.Tx, error) {
	tx, err := f.Pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, int32(fenceClass), int32(fenceKey)); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("hold the sink back: %w", err)
	}
	return tx, nil
}

// bump changes the generation, committed on its own (outside the hold):
// the sink reads it only once the fence is free again, and a bump without
// a swap (the replay dying right after it) only costs the sink a reload of
// its offsets.
func (f PostgresFence) bump(ctx context.Context) error {
	if _, err := f.Pool.Exec(ctx, `UPDATE requestlog_generation SET generation = generation + 1`); err != nil {
		return fmt.Errorf("bump generation: %w", err)
	}
	return nil
}
