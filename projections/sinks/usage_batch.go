package sinks

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
)

// handle applies one partition's batch; the loop commits its offset
// afterwards, and retries it while Postgres is down.
func (u *Usage) handle(ctx context.Context, mb *kafka.Batch) error {
	b := &usageBatch{partition: mb.Partition()}
	for _, m := range mb.Messages {
		b.add(u, m)
	}
	if err := u.metrics.write(SinkUsage, len(b.uses), func() error { return u.apply(ctx, b) }); err != nil {
		return fmt.Errorf("api-key usage: %w", err)
	}
	u.ignored.Add(b.ignored)
	u.poisoned.Add(b.poisoned)
	if u.afterApply != nil {
		if err := u.afterApply(); err != nil {
			return kafka.Stop(err)
		}
	}
	return nil
}

// use is one event that names an API key.
type use struct {
	offset int64
	key    int64
	at     time.Time
}

// batch is one partition's records since the last apply.
type usageBatch struct {
	partition int32
	uses      []use
	// last is the highest offset seen, stored and committed with the
	// batch whether or not its records named a key.
	last    int64
	records int
	// ignored events named no key; poisoned records could not be read.
	ignored, poisoned int64
}

// add reads m. A record the ClickHouse sink would dead-letter (unreadable
// or holding an invalid event) is not counted here either, so both read
// models agree on what happened.
func (b *usageBatch) add(u *Usage, m *sarama.ConsumerMessage) {
	b.records++
	b.last = m.Offset
	evs, err := requestlog.DecodeBatch(m.Value, nil)
	if err == nil {
		for i, e := range evs {
			if errs := requestlog.Check(i, e); len(errs) > 0 {
				err = errs[0]
				break
			}
		}
	}
	if err != nil {
		b.poisoned++
		u.log.Warn("api-key usage: unreadable request-log record ignored", "partition", m.Partition, "offset", m.Offset, "err", err)
		return
	}
	for _, e := range evs {
		if e.APIKeyID == 0 {
			b.ignored++
			continue
		}
		b.uses = append(b.uses, use{offset: m.Offset, key: e.APIKeyID, at: e.CreatedAt})
	}
}

// Statements of apply. The offset row is claimed first (inserted or
// locked), so two members that briefly both hold a partition during a
// rebalance apply one after the other and the second sees the first's
// offset. The keys are locked in id order before the UPDATE so batches of
// different partitions touching the same keys never deadlock.
const (
	claimOffset = `INSERT INTO consumer_offsets AS o (consumer, topic, kafka_partition, last_offset) VALUES ($1, $2, $3, -1)
		ON CONFLICT (consumer, topic, kafka_partition) DO UPDATE SET last_offset = o.last_offset
		RETURNING last_offset`
	lockKeys    = `SELECT id FROM api_keys WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE`
	applyCounts = `UPDATE api_keys AS k
		SET request_count = k.request_count + u.n,
		    last_used_at = GREATEST(k.last_used_at, u.at)
		FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS u(id, n, at)
		WHERE k.id = u.id`
	storeOffset = `UPDATE consumer_offsets SET last_offset = $4
		WHERE consumer = $1 AND topic = $2 AND kafka_partition = $3 AND last_offset < $4`
)

// apply counts, in one transaction, the uses of b above the stored offset
// and stores b's last offset.
func (u *Usage) apply(ctx context.Context, b *usageBatch) error {
	tx, err := u.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	skipped, err := u.applyTx(ctx, tx, b)
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	u.applied.Add(int64(len(b.uses)) - skipped)
	u.skipped.Add(skipped)
	return nil
}

// applyTx counts in tx the uses of b above the stored offset and stores
// b's last offset; it returns how many uses it skipped. The table names
// are unqualified, so a replay's connection applies into its shadow
// tables.
func (u *Usage) applyTx(ctx context.Context, tx pgx.Tx, b *usageBatch) (int64, error) {
	var stored int64
	if err := tx.QueryRow(ctx, claimOffset, u.cfg.Name, u.topic, b.partition).Scan(&stored); err != nil {
		return 0, fmt.Errorf("stored offset: %w", err)
	}
	type agg struct {
		n  int64
		at time.Time
	}
	per := map[int64]*agg{}
	var skipped int64
	for _, x := range b.uses {
		if x.offset <= stored {
			skipped++
			continue
		}
		a := per[x.key]
		if a == nil {
			a = &agg{}
			per[x.key] = a
		}
		a.n++
		if x.at.After(a.at) {
			a.at = x.at
		}
	}
	ids := make([]int64, 0, len(per))
	for id := range per {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if len(ids) > 0 {
		ns, ats := make([]int64, len(ids)), make([]time.Time, len(ids))
		for i, id := range ids {
			ns[i], ats[i] = per[id].n, per[id].at
		}
		if _, err := tx.Exec(ctx, lockKeys, ids); err != nil {
			return 0, fmt.Errorf("lock keys: %w", err)
		}
		if _, err := tx.Exec(ctx, applyCounts, ids, ns, ats); err != nil {
			return 0, fmt.Errorf("apply usage: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, storeOffset, u.cfg.Name, u.topic, b.partition, b.last); err != nil {
		return 0, fmt.Errorf("store offset: %w", err)
	}
	return skipped, nil
}
