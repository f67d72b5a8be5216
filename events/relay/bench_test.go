package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/bus"
	"github.com/cfgd/cfgd/events/store"
)

// BenchmarkRelay measures the outbox relay (read in commit order from
// Postgres, publish in batches of 500, move the checkpoint) against a
// baseline measured in the same run: the same number of records sent in the
// same batches with a bare sarama SyncProducer configured identically
// (acks=all, idempotent), which is as fast as the relay could publish.
// The ratio is the figure to watch; absolute numbers depend on the machine.
func BenchmarkRelay(b *testing.B) {
	const n = 5000
	pool, c := setup(b, 8)
	ctx := context.Background()
	var envs []events.Envelope
	for i := range n {
		e, _ := events.New(fmt.Sprintf("s-%d", i%200), noted{N: i}, events.Metadata{}, time.Now())
		envs = append(envs, e)
	}
	for i := 0; i < n; i += 500 {
		for _, e := range envs[i : i+500] {
			if _, err := store.Append(ctx, pool, e.Stream, events.AnyVersion, e); err != nil {
				b.Fatal(err)
			}
		}
	}
	producer, err := sarama.NewSyncProducer(c.Brokers, c.ProducerSarama())
	if err != nil {
		b.Fatal(err)
	}
	defer producer.Close()
	body := make([]byte, 400)

	var relayTime, baseTime time.Duration
	b.ResetTimer()
	for range b.N {
		_, _ = pool.Exec(ctx, `DELETE FROM relay_checkpoints`)
		r := newRelay(b, pool, c, nil, 500)
		start := time.Now()
		if got, err := stepUntil(b, r, n); err != nil || got != n {
			b.Fatalf("relayed %d (%v)", got, err)
		}
		relayTime += time.Since(start)

		start = time.Now()
		for i := 0; i < n; i += 500 {
			batch := make([]*sarama.ProducerMessage, 0, 500)
			for _, e := range envs[i : i+500] {
				batch = append(batch, &sarama.ProducerMessage{Topic: c.Topic(bus.TopicEvents), Key: sarama.StringEncoder(e.Stream), Value: sarama.ByteEncoder(body)})
			}
			if err := producer.SendMessages(batch); err != nil {
				b.Fatal(err)
			}
		}
		baseTime += time.Since(start)
	}
	relayRate := float64(n*b.N) / relayTime.Seconds()
	baseRate := float64(n*b.N) / baseTime.Seconds()
	b.ReportMetric(relayRate, "relay_events/s")
	b.ReportMetric(baseRate, "sarama_sync_msgs/s")
	b.ReportMetric(relayRate/baseRate, "relay/baseline")
}
