package requestlogkafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
)

func events(n int) []requestlog.Event {
	out := make([]requestlog.Event, n)
	for i := range out {
		out[i] = requestlog.Event{RequestID: fmt.Sprint(i), ServiceName: "s.S", MethodName: "M", Status: requestlog.StatusSuccess,
			GRPCStatusCode: "OK", DurationMS: int64(i), CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	}
	return out
}

func TestProducerPacksEventsIntoTopic(t *testing.T) {
	t.Parallel()
	c := testenv.Kafka(t, 3)
	cfg := requestlogkafka.DefaultProducerConfig(c)
	cfg.PackEvents = 100
	cfg.Timeout = 10 * time.Second // a loaded test machine; the bound itself is tested below
	p, err := requestlogkafka.NewProducer(cfg, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Produce(context.Background(), events(1050)); err != nil {
		t.Fatal(err)
	}
	msgs := testenv.ReadTopic(t, c, p.Topic(), 11, 10*time.Second)
	if len(msgs) != 11 {
		t.Fatalf("got %d records, want 11 (1050 events packed by 100)", len(msgs))
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		evs, err := requestlog.DecodeBatch(m.Value, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			seen[e.RequestID] = true
		}
	}
	if len(seen) != 1050 || p.Produced() != 1050 {
		t.Fatalf("distinct events %d, produced %d; want 1050", len(seen), p.Produced())
	}
}

func TestProducerFailsFastWhenKafkaIsDown(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(t *testing.T) (kafka.Config, func())
	}{
		{"never reachable", func(t *testing.T) (kafka.Config, func()) {
			return kafka.Config{Brokers: []string{"127.0.0.1:1"}, Partitions: 1, TopicPrefix: "x."}, func() {}
		}},
		{"goes away", func(t *testing.T) (kafka.Config, func()) {
			e, err := kafka.StartEmbedded("", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Close)
			return kafka.Config{Brokers: []string{e.Addr()}, SASL: e.SASL(), Partitions: 1, TopicPrefix: "x."}, e.Close
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			bc, kill := c.setup(t)
			p, err := requestlogkafka.NewProducer(requestlogkafka.DefaultProducerConfig(bc), testenv.Quiet())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if c.name == "goes away" {
				if err := p.Produce(context.Background(), events(10)); err != nil {
					t.Fatalf("first produce: %v", err)
				}
			}
			kill()
			for i := range 3 {
				start := time.Now()
				err := p.Produce(context.Background(), events(10))
				took := time.Since(start)
				if !errors.Is(err, requestlog.ErrUnavailable) {
					t.Fatalf("attempt %d: err = %v, want ErrUnavailable", i, err)
				}
				if took > 1500*time.Millisecond {
					t.Fatalf("attempt %d took %v, want about a second at most", i, took)
				}
			}
		})
	}
}
