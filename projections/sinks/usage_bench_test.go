package sinks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/projections/projectors"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
)

// BenchmarkReplayUsageFeed replays the API keys (10 keys) with 20,000
// usage records of the 10 keys (what the recorder sends in 20,000
// flushes), with the consumer's default batch of 500 records, and reports
// the records read per second:
//
//	go test -run '^$' -bench ReplayUsageFeed -benchtime 3x ./projections/sinks/
func BenchmarkReplayUsageFeed(b *testing.B) {
	ctx := context.Background()
	pool := testenv.Postgres(b)
	c := testenv.Kafka(b, 3)
	const keys, records = 10, 20_000
	for id := int64(1); id <= keys; id++ {
		env, err := events.New(apikey.Stream(id), apikey.Created{KeyID: id, Name: fmt.Sprint("k", id), KeyType: apikey.TypeService,
			KeyHash: fmt.Sprint("hash", id), MaskedKey: "cfgd...abcd", UserID: 1, UserEmail: "a@example.com", CreatedBy: "bench", CreatedAt: time.Now()}, events.Metadata{}, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.Append(ctx, pool, env.Stream, events.NoStream, env); err != nil {
			b.Fatal(err)
		}
	}
	// As the recorder sends them: one record per flush, one use per key.
	prod, err := kafka.NewProducer(c, kafka.ProducerOptions{Timeout: 30 * time.Second, Topics: []string{kafka.TopicAPIKeyUsage}}, testenv.Quiet())
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	at := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	msgs := make([]*sarama.ProducerMessage, 0, 1000)
	for r := range records {
		flush := make([]apikey.Use, keys)
		for k := range flush {
			flush[k] = apikey.Use{KeyID: int64(k) + 1, Requests: 1, LastUsed: at.Add(time.Duration(r) * time.Millisecond)}
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: c.Topic(kafka.TopicAPIKeyUsage), Value: sarama.ByteEncoder(apikey.AppendUses(nil, flush))})
		if len(msgs) == cap(msgs) {
			if err := prod.Send(ctx, msgs...); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	reg, err := events.NewRegistry(apikey.Events()...)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		f, err := sinks.NewUsageFeed(sinks.DefaultUsageConfig(c), testenv.Quiet())
		if err != nil {
			b.Fatal(err)
		}
		p := projectors.Keys()
		p.Feeds = append(p.Feeds, f)
		if _, err := replay.Run(ctx, pool, reg, p, replay.Config{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	var total int64
	if err := pool.QueryRow(ctx, `SELECT sum(request_count) FROM api_keys`).Scan(&total); err != nil || total != keys*records {
		b.Fatalf("counted %d uses (%v), want %d", total, err, keys*records)
	}
}
