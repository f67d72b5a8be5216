package replay

import (
	"context"
	"errors"
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
// holds of them again. base is what to add to each partition's offsets
// (non-zero after the topic was created again, see Recreated). Once fn
// succeeds the stale partitions are recorded as writer's.
func (f PostgresFence) Own(ctx context.Context, topic string, parts []int32, writer string,
	fn func(gen int64, stale []int32, base map[int32]int64) error) error {
	parts = slices.Sorted(slices.Values(parts))
	return pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
		gen, err := shared(ctx, tx)
		if err != nil {
			return err
		}
		if err := lockPartitions(ctx, tx, topic, parts); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT p, w.writer IS DISTINCT FROM $3, coalesce(w.base, 0)
			FROM unnest($2::int[]) AS p
			LEFT JOIN requestlog_writers w ON w.topic = $1 AND w.kafka_partition = p`, topic, parts, writer)
		if err != nil {
			return fmt.Errorf("request-log writers: %w", err)
		}
		var stale []int32
		base := map[int32]int64{}
		var p int32
		var other bool
		var b int64
		if _, err := pgx.ForEachRow(rows, []any{&p, &other, &b}, func() error {
			if other {
				stale = append(stale, p)
			}
			if b != 0 {
				base[p] = b
			}
			return nil
		}); err != nil {
			return fmt.Errorf("request-log writers: %w", err)
		}
		if err := fn(gen, stale, base); err != nil {
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

func lockPartitions(ctx context.Context, tx pgx.Tx, topic string, parts []int32) error {
	for _, p := range parts {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2::int::text, 0))`, topic, p); err != nil {
			return fmt.Errorf("request-log partition %d: %w", p, err)
		}
	}
	return nil
}

// Recreated records id as topic's (kafka.TopicID) and tells whether it
// replaced another: the topic was deleted and created again, and its
// offsets start over. Then every partition's base becomes one past the
// highest offset ClickHouse holds of it (next, read with the fence held
// exclusively, so no batch writes meanwhile): the new topic's records are
// stored after the old one's, under new ids, instead of being taken for
// them. Every writer reads its offsets again.
func (f PostgresFence) Recreated(ctx context.Context, topic, id string, next func(ctx context.Context) (map[int32]int64, error)) (bool, error) {
	// The usual answer, without holding every writer back.
	var known string
	if err := f.Pool.QueryRow(ctx, `SELECT topic_id FROM requestlog_topics WHERE topic = $1`, topic).Scan(&known); err == nil && known == id {
		return false, nil
	}
	recreated := false
	err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, int32(fenceClass), int32(fenceKey)); err != nil {
			return fmt.Errorf("request-log fence: %w", err)
		}
		err := tx.QueryRow(ctx, `SELECT topic_id FROM requestlog_topics WHERE topic = $1 FOR UPDATE`, topic).Scan(&known)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			_, err = tx.Exec(ctx, `INSERT INTO requestlog_topics (topic, topic_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, topic, id)
			return err
		case err != nil:
			return fmt.Errorf("request-log topic id: %w", err)
		case known == id:
			return nil
		}
		bases, err := next(ctx)
		if err != nil {
			return err
		}
		for p, b := range bases {
			if _, err := tx.Exec(ctx, `INSERT INTO requestlog_writers (topic, kafka_partition, writer, base) VALUES ($1, $2, '', $3)
				ON CONFLICT (topic, kafka_partition) DO UPDATE SET writer = '', base = EXCLUDED.base`, topic, p, b); err != nil {
				return fmt.Errorf("request-log offset base: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE requestlog_topics SET topic_id = $2 WHERE topic = $1`, topic, id); err != nil {
			return fmt.Errorf("request-log topic id: %w", err)
		}
		recreated = true
		return nil
	})
	return recreated, err
}

// bases are the offset bases Recreated set for topic's partitions (none
// before the topic is first created again).
func (f PostgresFence) bases(ctx context.Context, topic string) (map[int32]int64, error) {
	rows, err := f.Pool.Query(ctx, `SELECT kafka_partition, base FROM requestlog_writers WHERE topic = $1 AND base <> 0`, topic)
	if err != nil {
		return nil, fmt.Errorf("request-log offset bases: %w", err)
	}
	out := map[int32]int64{}
	var p int32
	var b int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &b}, func() error { out[p] = b; return nil }); err != nil {
		return nil, fmt.Errorf("request-log offset bases: %w", err)
	}
	return out, nil
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
	// The rebuilt tables hold the topic as it is now, from offset 0 on:
	// the offset bases and the topic id recorded for the old tables go
	// (the sink records the id again at its next session).
	return pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
		for _, q := range []string{`UPDATE requestlog_generation SET generation = generation + 1`,
			`UPDATE requestlog_writers SET base = 0, writer = ''`, `DELETE FROM requestlog_topics`} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("bump generation: %w", err)
			}
		}
		return nil
	})
}
