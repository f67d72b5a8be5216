package requestlogkafka_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
)

// A Produce that times out while the broker holds its records is a
// requestlog.InDoubt: Settle reports, per event, what the broker did with
// them once it answers, and Close returns only after the callback ran
// (a keyed call writes its outcome there; chaos finding 2).
func TestProduceInDoubtSettlesBeforeClose(t *testing.T) {
	t.Parallel()
	p, _, open := testenv.HeldProducer(t, false, func(c *requestlogkafka.ProducerConfig) { c.PackEvents = 2 })
	err := p.Produce(context.Background(), events(3))
	d, ok := errors.AsType[requestlog.InDoubt](err)
	if !ok || !errors.Is(err, requestlog.ErrUnavailable) {
		t.Fatalf("produce against a held broker: %v", err)
	}
	var settled atomic.Bool
	d.Settle(time.Minute, func(lost []int, err error) {
		time.Sleep(200 * time.Millisecond) // a keyed call writing its outcome
		if len(lost) != 0 || err != nil {
			t.Errorf("lost %v, %v: want every event stored", lost, err)
		}
		settled.Store(true)
	})
	open()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !settled.Load() {
		t.Fatal("Close returned before the settle callback ended")
	}
	if p.Produced() != 3 {
		t.Fatalf("produced %d, want the 3 events stored late", p.Produced())
	}
}
