package sinks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/signing"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
)

// handle applies one partition's batch; the loop commits its offset
// afterwards, and retries it while Postgres is down.
func (u *Usage) handle(ctx context.Context, mb *kafka.Batch) error {
	id, err := u.topicID(ctx, mb.Session)
	if err != nil {
		return fmt.Errorf("api-key usage: %w", err)
	}
	b := &usageBatch{partition: mb.Partition(), topicID: id}
	var newer error
	var at *sarama.ConsumerMessage
	for _, m := range mb.Messages {
		// Applied up to a record only a newer cfgd understands; it waits
		// for a newer member of the group.
		if newer = usesSchema(m); newer != nil {
			at = m
			break
		}
		b.add(u, m)
	}
	if b.records == 0 && newer != nil {
		return kafka.Yield(newer, at)
	}
	if err := u.metrics.write(SinkUsage, len(b.uses), func() error { return u.apply(ctx, b) }); err != nil {
		return fmt.Errorf("api-key usage: %w", err)
	}
	u.poisoned.Add(b.poisoned)
	if u.afterApply != nil {
		if err := u.afterApply(); err != nil {
			return kafka.Stop(err)
		}
	}
	if newer != nil {
		return kafka.Yield(newer, at)
	}
	return nil
}

// usesSchema is *events.ErrNewerSchema for a usage record of a format
// newer than this build's.
func usesSchema(m *sarama.ConsumerMessage) error {
	return events.CheckFormat(apikey.UsesFormat, events.ParseSchemaHeader(header(m, events.HeaderSchemaVersion)), apikey.UsesVersion)
}

// use is one key's uses in one record.
type use struct {
	offset int64
	apikey.Use
}

// batch is one partition's records since the last apply.
type usageBatch struct {
	partition int32
	// topicID is the id of the topic the records come from ("" when the
	// brokers give none): offsets stored for another id are not trusted.
	topicID string
	// restarted: this batch found the topic created again.
	restarted bool
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
	uses, err := decodeUses(m, u.cfg.Signer, u.cfg.Cutover)
	if err != nil {
		b.poisoned++
		u.log.Warn("api-key usage: unreadable usage record ignored", "partition", m.Partition, "offset", m.Offset, "err", err)
		return
	}
	for _, x := range uses {
		b.uses = append(b.uses, use{offset: m.Offset, Use: x})
	}
}

// topicID is the usage topic's id, read once per consumer-group session
// (a topic deleted and created again is noticed at the next session).
func (u *Usage) topicID(ctx context.Context, session uint64) (string, error) {
	u.idMu.Lock()
	defer u.idMu.Unlock()
	if u.idRead && u.idSession == session {
		return u.idValue, nil
	}
	id, err := kafka.TopicID(ctx, u.cfg.Bus, kafka.TopicAPIKeyUsage)
	if errors.Is(err, kafka.ErrNoTopicID) {
		id, err = "", nil // brokers before 2.8: nothing to compare
	}
	if err != nil {
		return "", err
	}
	if err := u.cfg.Cutover.Session(ctx, session); err != nil {
		return "", err
	}
	u.idRead, u.idSession, u.idValue = true, session, id
	return id, nil
}

// topicRecreated says, in the log, the metric and Ready (until the next
// batch is applied), that the topic was created again.
func (u *Usage) topicRecreated(ctx context.Context, partition int32, id string) {
	u.recreated.Add(1)
	err := process.NotReady(process.TopicRecreated, fmt.Errorf("api-key usage: %s was deleted and created again (id %s): counting from its start", u.topic, id))
	u.notice.Store(&err)
	u.log.WarnContext(ctx, "api-key usage topic was deleted and created again: counting from its start",
		"topic", u.topic, "topic_id", id, "partition", partition)
}

// decodeUses reads a usage record signed with v's key (nil v: no check;
// unsigned below cut's watermark), so a record forged with a broker login
// alone counts no use.
func decodeUses(m *sarama.ConsumerMessage, v *events.Signer, cut *signing.Cutover) ([]apikey.Use, error) {
	if v != nil {
		if err := cut.Verify(v, m); err != nil {
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
	if n := u.notice.Load(); n != nil && !b.restarted {
		u.notice.CompareAndSwap(n, nil)
	}
	return nil
}

// applyTx counts in tx the uses of b above the stored offset and stores
// b's last offset; it returns how many requests it skipped. The table names
// are unqualified, so a replay's connection applies into its shadow
// tables.
func (u *Usage) applyTx(ctx context.Context, tx pgx.Tx, b *usageBatch) (int64, error) {
	stored, storedID, err := apikeyview.ClaimOffset(ctx, tx, u.cfg.Name, u.topic, b.partition)
	if err != nil {
		return 0, err
	}
	if b.topicID != "" && storedID != b.topicID {
		// Recorded for another topic of the same name: it was deleted
		// and created again, and its offsets started over at 0.
		recreated := storedID != ""
		if err := apikeyview.AdoptTopic(ctx, tx, u.cfg.Name, u.topic, b.partition, b.topicID, recreated); err != nil {
			return 0, err
		}
		if recreated {
			stored, b.restarted = -1, true
			u.topicRecreated(ctx, b.partition, b.topicID)
		}
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
