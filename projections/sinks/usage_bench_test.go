package sinks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cfgd/cfgd/projections/projectors"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
)

// BenchmarkReplayUsageFeed replays the API keys (10 keys) with 200,000
// uses on the request log (packed 100 to a record, as the producer
// does), with the consumer's default batch of 500 records, and reports
// the uses read per second:
//
//	go test -run '^$' -bench ReplayUsageFeed -benchtime 3x ./projections/sinks/
func BenchmarkReplayUsageFeed(b *testing.B) {
	ctx := context.Background()
	pool := testenv.Postgres(b)
	c := testenv.Kafka(b, 3)
	const keys, uses = 10, 200_000
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
	pc := requestlogkafka.DefaultProducerConfig(c)
	pc.PackEvents = 100
	pc.Timeout = 30 * time.Second
	prod, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	evs := make([]requestlog.Event, 0, 1000)
	at := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	for i := range uses {
		evs = append(evs, requestlog.Event{ServiceName: "svc", MethodName: "M", Status: requestlog.StatusSuccess, CreatedAt: at.Add(time.Duration(i) * time.Millisecond), APIKeyID: int64(i%keys) + 1})
		if len(evs) == cap(evs) {
			if err := prod.Produce(ctx, evs); err != nil {
				b.Fatal(err)
			}
			evs = evs[:0]
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
	b.ReportMetric(float64(uses)*float64(b.N)/b.Elapsed().Seconds(), "uses/s")
	var total int64
	if err := pool.QueryRow(ctx, `SELECT sum(request_count) FROM api_keys`).Scan(&total); err != nil || total != uses {
		b.Fatalf("counted %d uses (%v), want %d", total, err, uses)
	}
}
