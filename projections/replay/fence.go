package replay

import (
	"context"
	"fmt"
	"slices"

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
		gen, err := shared(ctx, tx)
		if err != nil {
			return err
		}
		return fn(gen)
	})
}

// shared takes the lock shared for tx and reads the generation.
func shared(ctx context.Context, tx pgx.Tx) (int64, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1, $2)`, int32(fenceClass), int32(fenceKey)); err != nil {
		return 0, fmt.Errorf("request-log fence: %w", err)
	}
	// A statement of its own: under READ COMMITTED its snapshot is
	// taken after the lock was granted, so it sees the generation a
	// swap that held the lock committed.
	var gen int64
	if err := tx.QueryRow(ctx, `SELECT generation FROM requestlog_generation`).Scan(&gen); err != nil {
		return 0, fmt.Errorf("request-log generation: %w", err)
	}
	return gen, nil
}

// Own is Shared that also holds partitions parts of topic for this
// writer alone until fn returns (a transaction-level advisory lock each,
// taken in ascending order). stale are the partitions another writer wrote
// last (requestlog_writers, migration 00016): fn must read what ClickHouse
// holds of them again. Once fn succeeds they are recorded as writer's.
func (f PostgresFence) Own(ctx context.Context, topic string, parts []int32, writer string, fn func(gen int64, stale []int32) error) error {
	parts = slices.Sorted(slices.Values(parts))
	return pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
		gen, err := shared(ctx, tx)
		if err != nil {
			return err
		}
		for _, p := range parts {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2::int::text, 0))`, topic, p); err != nil {
				return fmt.Errorf("request-log partition %d: %w", p, err)
			}
		}
		rows, err := tx.Query(ctx, `SELECT p FROM unnest($2::int[]) AS p
			WHERE NOT EXISTS (SELECT 1 FROM requestlog_writers w WHERE w.topic = $1 AND w.kafka_partition = p AND w.writer = $3)`,
			topic, parts, writer)
		if err != nil {
			return fmt.Errorf("request-log writers: %w", err)
		}
		stale, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return fmt.Errorf("request-log writers: %w", err)
		}
		if err := fn(gen, stale); err != nil {
			return err
		}
		if len(stale) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO requestlog_writers (topic, kafka_partition, writer)
			SELECT $1, p, $3 FROM unnest($2::int[]) AS p
			ON CONFLICT (topic, kafka_partition) DO UPDATE SET writer = EXCLUDED.writer`, topic, stale, writer); err != nil {
			return fmt.Errorf("request-log writers: %w", err)
		}
		return nil
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
