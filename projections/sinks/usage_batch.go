package sinks

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
)

// handle applies one partition's batch; the loop commits its offset
// afterwards, and retries it while Postgres is down.
func (u *Usage) handle(ctx context.Context, mb *kafka.Batch) error {
	b := &usageBatch{partition: mb.Partition()}
	for _, m := range mb.Messages {
		b.add(u, m)
	}
	if err := u.apply(ctx, b); err != nil {
		return fmt.Errorf("api-key usage: %w", err)
	}
	u.poisoned.Add(b.poisoned)
	if u.afterApply != nil {
		if err := u.afterApply(); err != nil {
			return kafka.Stop(err)
		}
	}
	return nil
}

// use is one key's uses in one record.
type use struct {
	offset int64
	apikey.Use
}

// batch is one partition's records since the last apply.
type usageBatch struct {
	partition int32
	uses      []use
	// last is the highest offset seen, stored and committed with the
	// batch whether or not its records could be read.
	last    int64
	records int
	// poisoned records could not be read.
	poisoned int64
}

// add reads m, a record of the usage topic (apikey.AppendUses).
func (b *usageBatch) add(u *Usage, m *sarama.ConsumerMessage) {
	b.records++
	b.last = m.Offset
	uses, err := decodeUses(m, u.cfg.Signer)
	if err != nil {
		b.poisoned++
		u.log.Warn("api-key usage: unreadable usage record ignored", "partition", m.Partition, "offset", m.Offset, "err", err)
		return
	}
	for _, x := range uses {
		b.uses = append(b.uses, use{offset: m.Offset, Use: x})
	}
}

// decodeUses reads a usage record signed with v's key (nil v: no check),
// so a record forged with a broker login alone counts no use.
func decodeUses(m *sarama.ConsumerMessage, v *events.Signer) ([]apikey.Use, error) {
	if v != nil {
		if err := v.Verify(m.Value, header(m, events.HeaderSignature)); err != nil {
			return nil, fmt.Errorf("%s: %w", kafka.ReasonBadSignature, err)
		}
	}
	return apikey.DecodeUses(m.Value, nil)
}

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
	var total int64
	for _, x := range b.uses {
		total += x.Requests
	}
	u.applied.Add(total - skipped)
	u.skipped.Add(skipped)
	return nil
}

// applyTx counts in tx the uses of b above the stored offset and stores
// b's last offset; it returns how many requests it skipped. The table names
// are unqualified, so a replay's connection applies into its shadow
// tables.
func (u *Usage) applyTx(ctx context.Context, tx pgx.Tx, b *usageBatch) (int64, error) {
	stored, err := apikeyview.ClaimOffset(ctx, tx, u.cfg.Name, u.topic, b.partition)
	if err != nil {
		return 0, err
	}
	per := map[int64]*apikeyview.Usage{}
	var skipped int64
	for _, x := range b.uses {
		if x.offset <= stored {
			skipped += x.Requests
			continue
		}
		a := per[x.KeyID]
		if a == nil {
			a = &apikeyview.Usage{KeyID: x.KeyID}
			per[x.KeyID] = a
		}
		a.Requests += x.Requests
		if x.LastUsed.After(a.LastUsed) {
			a.LastUsed = x.LastUsed
		}
	}
	uses := make([]apikeyview.Usage, 0, len(per))
	for _, a := range per {
		uses = append(uses, *a)
	}
	slices.SortFunc(uses, func(a, b apikeyview.Usage) int { return cmp.Compare(a.KeyID, b.KeyID) })
	if err := apikeyview.ApplyUsage(ctx, tx, uses); err != nil {
		return 0, err
	}
	if err := apikeyview.StoreOffset(ctx, tx, u.cfg.Name, u.topic, b.partition, b.last); err != nil {
		return 0, err
	}
	return skipped, nil
}
