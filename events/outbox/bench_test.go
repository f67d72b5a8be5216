package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/events/store"
)

// BenchmarkRelay measures the outbox relay (read in commit order from
// Postgres, publish in batches of 500, move the checkpoint) against a
// baseline measured in the same run: the relay's own records (the same
// signed envelope bodies, headers and keys, built from the stored events)
// sent in the same batches with a bare sarama SyncProducer configured
// identically (acks=all, idempotent), which is as fast as the relay could
// publish.
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
	stored, err := store.ReadAll(ctx, pool, 0, n)
	if err != nil || len(stored) != n {
		b.Fatalf("read back %d events (%v)", len(stored), err)
	}
	records := make([]*sarama.ProducerMessage, n)
	for i, e := range stored {
		m, err := outbox.SignedMessage(testenv.Signer(b), e)
		if err != nil {
			b.Fatal(err)
		}
		if records[i], err = kafka.Marshaler().Marshal(c.Topic(kafka.TopicEvents), m); err != nil {
			b.Fatal(err)
		}
	}

	var relayTime, baseTime time.Duration
	b.ResetTimer()
	for i := range b.N {
		if _, err := pool.Exec(ctx, `DELETE FROM relay_checkpoints`); err != nil {
			b.Fatal(err)
		}
		r := newRelay(b, pool, c, nil, 500)
		start := time.Now()
		if got, err := stepUntil(b, r, n); err != nil || got != n {
			b.Fatalf("relayed %d (%v)", got, err)
		}
		relayTime += time.Since(start)
		if i == 0 {
			b.StopTimer()
			sameRecords(b, c, records)
			b.StartTimer()
		}

		start = time.Now()
		for i := 0; i < n; i += 500 {
			batch := make([]*sarama.ProducerMessage, 500)
			for j, r := range records[i : i+500] {
				cp := *r // sarama fills in offsets and retries on the message it is given
				batch[j] = &cp
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

// sameRecords fails b unless the relay's records on the topic are byte for
// byte the baseline's: same body, key and headers per event.
func sameRecords(b *testing.B, c kafka.Config, records []*sarama.ProducerMessage) {
	b.Helper()
	onTopic := map[string]*sarama.ConsumerMessage{}
	for _, m := range testenv.ReadTopic(b, c, c.Topic(kafka.TopicEvents), len(records), 60*time.Second) {
		onTopic[string(m.Value)] = m
	}
	for _, r := range records {
		body, _ := r.Value.Encode()
		key, _ := r.Key.Encode()
		m, ok := onTopic[string(body)]
		if !ok || string(m.Key) != string(key) || len(m.Headers) != len(r.Headers) {
			b.Fatalf("the baseline sends a record the relay did not: %s", body)
		}
		want := map[string]string{}
		for _, h := range r.Headers {
			want[string(h.Key)] = string(h.Value)
		}
		for _, h := range m.Headers {
			if want[string(h.Key)] != string(h.Value) {
				b.Fatalf("header %s: relay %q, baseline %q", h.Key, h.Value, want[string(h.Key)])
			}
		}
	}
}
