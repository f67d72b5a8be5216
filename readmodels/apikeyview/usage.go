package apikeyview

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Conn is what the usage writes need: a pgx.Tx, or a replay's *pgx.Conn
// whose search_path puts its shadow tables first (the table names below
// are unqualified for that reason, except where a statement names the live
// table on purpose).
type Conn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// claimOffset inserts or locks the offset row, so two members that briefly
// both hold a partition during a rebalance apply one after the other and
// the second sees the first's offset.
const claimOffset = `
	INSERT INTO consumer_offsets AS o (consumer, topic, kafka_partition, last_offset) VALUES ($1, $2, $3, -1)
	ON CONFLICT (consumer, topic, kafka_partition) DO UPDATE SET last_offset = o.last_offset
	RETURNING last_offset, topic_id`

// ClaimOffset locks consumer's offset row of topic's partition (creating
// it at -1) and returns the last offset applied and the id of the topic
// it was read from ("" when not recorded).
func ClaimOffset(ctx context.Context, tx Conn, consumer, topic string, partition int32) (offset int64, topicID string, err error) {
	if err := tx.QueryRow(ctx, claimOffset, consumer, topic, partition).Scan(&offset, &topicID); err != nil {
		return 0, "", fmt.Errorf("stored offset: %w", err)
	}
	return offset, topicID, nil
}

const adoptTopic = `
	UPDATE consumer_offsets SET topic_id = $4, last_offset = CASE WHEN $5 THEN -1 ELSE last_offset END
	WHERE consumer = $1 AND topic = $2 AND kafka_partition = $3`

// AdoptTopic records topicID as the topic the offsets of the partition
// come from; restart also sets the offset back to -1 (a topic created
// again starts over at 0).
func AdoptTopic(ctx context.Context, tx Conn, consumer, topic string, partition int32, topicID string, restart bool) error {
	if _, err := tx.Exec(ctx, adoptTopic, consumer, topic, partition, topicID, restart); err != nil {
		return fmt.Errorf("record topic id: %w", err)
	}
	return nil
}

const storeOffset = `
	UPDATE consumer_offsets SET last_offset = $4
	WHERE consumer = $1 AND topic = $2 AND kafka_partition = $3 AND last_offset < $4`

// StoreOffset records offset as applied (it never moves back).
func StoreOffset(ctx context.Context, tx Conn, consumer, topic string, partition int32, offset int64) error {
	if _, err := tx.Exec(ctx, storeOffset, consumer, topic, partition, offset); err != nil {
		return fmt.Errorf("store offset: %w", err)
	}
	return nil
}

// Usage is what one batch adds to one key.
type Usage struct {
	KeyID    int64
	Requests int64
	LastUsed time.Time
}

// The keys are locked in id order before the UPDATE so batches of
// different partitions touching the same keys never deadlock.
const (
	lockKeys    = `SELECT id FROM api_keys WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE`
	applyCounts = `
	UPDATE api_keys AS k
	SET request_count = k.request_count + u.n,
	    last_used_at = GREATEST(k.last_used_at, u.at)
	FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS u(id, n, at)
	WHERE k.id = u.id`
)

// ApplyUsage adds each Usage to its key's request_count and moves its
// last_used_at forward (never back); keys that do not exist are skipped.
// uses must be in key id order, one per key.
func ApplyUsage(ctx context.Context, tx Conn, uses []Usage) error {
	if len(uses) == 0 {
		return nil
	}
	ids, ns, ats := make([]int64, len(uses)), make([]int64, len(uses)), make([]time.Time, len(uses))
	for i, u := range uses {
		ids[i], ns[i], ats[i] = u.KeyID, u.Requests, u.LastUsed
	}
	if _, err := tx.Exec(ctx, lockKeys, ids); err != nil {
		return fmt.Errorf("lock keys: %w", err)
	}
	if _, err := tx.Exec(ctx, applyCounts, ids, ns, ats); err != nil {
		return fmt.Errorf("apply usage: %w", err)
	}
	return nil
}

// CreateShadowOffsets makes an empty consumer_offsets like the live one
// in the first schema of conn's search_path: a replay's shadow schema.
func CreateShadowOffsets(ctx context.Context, conn Conn) error {
	if _, err := conn.Exec(ctx, `CREATE TABLE consumer_offsets (LIKE public.consumer_offsets INCLUDING ALL)`); err != nil {
		return fmt.Errorf("shadow consumer_offsets: %w", err)
	}
	return nil
}

// LockLiveOffsets keeps the live consumers from applying until tx ends:
// they claim their offset row before they lock keys, so a replay's swap
// takes the offsets first.
func LockLiveOffsets(ctx context.Context, tx Conn) error {
	if _, err := tx.Exec(ctx, `LOCK TABLE public.consumer_offsets IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("lock consumer_offsets: %w", err)
	}
	return nil
}

// NextOffsets returns, per partition, the offset after the last one
// consumer applied from topic, as stored in schema's consumer_offsets
// ("public" for the live table).
func NextOffsets(ctx context.Context, tx Conn, schema, consumer, topic string) (map[int32]int64, error) {
	rows, err := tx.Query(ctx, `SELECT kafka_partition, last_offset FROM `+pgx.Identifier{schema, "consumer_offsets"}.Sanitize()+
		` WHERE consumer = $1 AND topic = $2`, consumer, topic)
	if err != nil {
		return nil, fmt.Errorf("%s offsets: %w", schema, err)
	}
	out := map[int32]int64{}
	var p int32
	var o int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &o}, func() error { out[p] = o + 1; return nil }); err != nil {
		return nil, fmt.Errorf("%s offsets: %w", schema, err)
	}
	return out, nil
}

// HandOverOffsets replaces consumer's live offsets of topic with those of
// the shadow schema, so the live consumer goes on where the replay stopped.
func HandOverOffsets(ctx context.Context, tx Conn, schema, consumer, topic string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM public.consumer_offsets WHERE consumer = $1 AND topic = $2`, consumer, topic); err != nil {
		return fmt.Errorf("replace offsets: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO public.consumer_offsets SELECT * FROM `+pgx.Identifier{schema, "consumer_offsets"}.Sanitize()+` WHERE consumer = $1 AND topic = $2`,
		consumer, topic); err != nil {
		return fmt.Errorf("replace offsets: %w", err)
	}
	return nil
}
