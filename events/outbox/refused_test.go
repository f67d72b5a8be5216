package outbox_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
)

// refusingPublisher refuses its first batches whole, as a broker that
// stores none of a batch does (every record failed, or an error that says
// nothing of how far the batch got), then publishes for real.
type refusingPublisher struct {
	inner   outbox.Publisher
	refuse  int64
	refused atomic.Int64
}

func (p *refusingPublisher) Publish(topic string, msgs ...*message.Message) error {
	n := p.refused.Add(1)
	switch {
	case n > p.refuse:
		return p.inner.Publish(topic, msgs...)
	case n%2 == 1:
		all := make([]int, len(msgs))
		for i := range all {
			all[i] = i
		}
		return &kafka.PublishError{Failed: all, Total: len(msgs), Err: errors.New("injected: NOT_ENOUGH_REPLICAS")}
	default:
		return errors.New("injected: broker unreachable")
	}
}

// A leading relay whose broker refuses whole batches, again and again:
// once the broker takes them, every event is on the topic exactly once
// (nothing of a refused batch was stored, so nothing is sent twice), and a
// consumer applying each stream's next version ends up equal to the store:
// nothing lost, nothing reordered.
func TestLeaderFacingABrokerThatRefusesWholeBatches(t *testing.T) {
	t.Parallel()
	pool, c := setup(t, 2)
	const perStream = 25
	for i := range perStream { // a1 b1 a2 b2 ...: both streams in every batch
		appendN(t, pool, "a", i, 1)
		appendN(t, pool, "b", i, 1)
	}
	real, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = real.Close() })
	pub := &refusingPublisher{inner: real, refuse: 4}
	runRelay(t, newRelay(t, pool, c, pub, 10))

	want, total := storeView(t, pool)
	msgs := testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), total, 30*time.Second)
	if pub.refused.Load() <= pub.refuse {
		t.Fatalf("only %d publishes: the refusals were not all met", pub.refused.Load())
	}
	ids := map[string]bool{}
	for _, m := range msgs {
		ids[string(m.Value)] = true
	}
	if len(msgs) != total || len(ids) != total {
		t.Fatalf("%d records (%d different) on the topic, want the %d events once each", len(msgs), len(ids), total)
	}
	sameView(t, consumerView(t, msgs), want)
}
