package kafka

import (
	"testing"

	"github.com/IBM/sarama"
)

// Memory proportional to the limits: a packed record weighs up to 512
// events, so the read-ahead of a weighed consumer is bounded in records,
// not in two batches' worth of them (100,000 records per partition for the
// request-log sink's batch of 50,000 events).
func TestReadAheadIsBoundedInMessages(t *testing.T) {
	events := func(*sarama.ConsumerMessage) int { return 512 }
	for _, c := range []struct {
		name string
		opts []ConsumeOption
		want int
	}{
		{"the default batch", nil, 1000},
		{"a small batch", []ConsumeOption{WithBatch(10, 0)}, 256},
		{"a batch of 50,000 messages", []ConsumeOption{WithBatch(50_000, 0)}, 100_000},
		{"a batch of 50,000 events in packed records", []ConsumeOption{WithBatch(50_000, 0), WithWeight(events)}, 256},
	} {
		o := &consumeOptions{batch: 500}
		for _, opt := range c.opts {
			opt(o)
		}
		if got := o.readAhead(); got != c.want {
			t.Errorf("%s: read-ahead %d messages, want %d", c.name, got, c.want)
		}
	}
}
