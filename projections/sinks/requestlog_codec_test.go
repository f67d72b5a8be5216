package sinks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
)

// Issue #20 points 10 and 13: the sink stores only records signed with
// the events' key, and of a signed record it dead-letters the bad events
// alone, never their neighbours.
func TestRequestLogCodecVerifiesAndDeadLettersPerEvent(t *testing.T) {
	t.Parallel()
	e := newRLEnv(t, 1)
	signer := testenv.Signer(t)
	pc := requestlogkafka.DefaultProducerConfig(e.bus)
	pc.Timeout, pc.Signer = 10*time.Second, signer
	signed, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer signed.Close()
	raw, err := kafka.NewProducer(e.bus, kafka.ProducerOptions{}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := context.Background()
	ev := func(rid string) requestlog.Event {
		return requestlog.Event{RequestID: rid, ServiceName: "svc.A", MethodName: "M", Status: requestlog.StatusSuccess, GRPCStatusCode: "OK", CreatedAt: time.Now().UTC()}
	}
	evs := make([]requestlog.Event, 100)
	for i := range evs {
		evs[i] = ev("n")
	}
	if err := signed.Produce(ctx, evs); err != nil {
		t.Fatal(err)
	}
	good := requestlog.AppendBatch(nil, []requestlog.Event{ev("a"), ev("b")})
	// An anonymous caller's x-request-id of bytes that are not UTF-8,
	// packed between two other callers' events.
	mixed := requestlog.AppendBatch(nil, []requestlog.Event{ev("before"), ev("bad-\xff"), ev("after")})
	other, err := events.NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	sig := func(s *events.Signer, b []byte) []sarama.RecordHeader {
		return []sarama.RecordHeader{{Key: []byte(events.HeaderSignature), Value: []byte(s.Sign(b))}}
	}
	for _, m := range []*sarama.ProducerMessage{
		{Topic: e.prod.Topic(), Value: sarama.ByteEncoder(good)},                                 // unsigned
		{Topic: e.prod.Topic(), Value: sarama.ByteEncoder(good), Headers: sig(other, good)},      // forged
		{Topic: e.prod.Topic(), Value: sarama.ByteEncoder(mixed), Headers: sig(signer, mixed)},   // one bad event
		{Topic: e.prod.Topic(), Value: sarama.ByteEncoder(good), Headers: sig(signer, good[:3])}, // signature of other bytes
	} {
		if err := raw.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	cfg := DefaultRequestLogConfig(e.bus)
	cfg.Group, cfg.BatchWait, cfg.Signer = "g", 50*time.Millisecond, signer
	s, err := NewRequestLogs(cfg, e.conn, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(rctx) }()
	defer func() { cancel(); <-done }()

	testenv.ExactRequestLogs(t, e.conn, 102)
	dead := testenv.ReadTopic(t, e.bus, e.bus.Topic(kafka.TopicRequestLogsDead), 4, 30*time.Second)
	if len(dead) != 4 {
		t.Fatalf("%d dead letters, want 4", len(dead))
	}
	for i, want := range []string{kafka.ReasonBadSignature, kafka.ReasonBadSignature, kafka.ReasonInvalid, kafka.ReasonBadSignature} {
		if got := headerOf(dead[i], kafka.HeaderDeadReason); got != want {
			t.Errorf("dead letter %d: reason %q, want %q", i, got, want)
		}
	}
	one, err := requestlog.DecodeBatch(dead[2].Value, nil)
	if err != nil || len(one) != 1 || one[0].RequestID != "bad-\xff" {
		t.Fatalf("the per-event dead letter holds %+v (%v)", one, err)
	}
	var n uint64
	if err := e.conn.QueryRow(ctx, "SELECT count() FROM requestlog_raw WHERE request_id IN ('before', 'after')").Scan(&n); err != nil || n != 2 {
		t.Fatalf("neighbours stored: %d, %v", n, err)
	}

	// The replay decodes through the same codec.
	for _, m := range []*sarama.ConsumerMessage{{Value: good}, {Value: good, Headers: []*sarama.RecordHeader{{Key: []byte(events.HeaderSignature), Value: []byte(other.Sign(good))}}}} {
		if d := (RequestLogCodec{Signer: signer}).Decode(m).(decoded); d.err == nil {
			t.Fatalf("replay took an unsigned or forged record")
		}
	}
}

func headerOf(m *sarama.ConsumerMessage, key string) string { return header(m, key) }

// Usage records are signed like request-log records: an unsigned or
// forged one counts no use; a signed one counts.
func TestUsageRefusesUnsignedAndForgedRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.keys(5)
	signer := testenv.Signer(t)
	other, err := events.NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := kafka.NewProducer(e.bus, kafka.ProducerOptions{Topics: []string{kafka.TopicAPIKeyUsage}}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	at := base.Add(time.Hour)
	body := apikey.AppendUses(nil, []apikey.Use{{KeyID: 5, Requests: 1000, LastUsed: at.Add(24 * time.Hour)}})
	good := apikey.AppendUses(nil, []apikey.Use{{KeyID: 5, Requests: 2, LastUsed: at}})
	sig := func(s *events.Signer, b []byte) []sarama.RecordHeader {
		return []sarama.RecordHeader{{Key: []byte(events.HeaderSignature), Value: []byte(s.Sign(b))}}
	}
	topic := e.bus.Topic(kafka.TopicAPIKeyUsage)
	for _, m := range []*sarama.ProducerMessage{
		{Topic: topic, Value: sarama.ByteEncoder(body)},                            // unsigned
		{Topic: topic, Value: sarama.ByteEncoder(body), Headers: sig(other, body)}, // forged
		{Topic: topic, Value: sarama.ByteEncoder(good), Headers: sig(signer, good)},
	} {
		if err := raw.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultUsageConfig(e.bus)
	cfg.Group, cfg.BatchWait, cfg.Signer = "g", 50*time.Millisecond, signer
	u, err := NewUsage(cfg, e.pool, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = u.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the records", func() bool { return u.Stats().Poisoned == 2 && u.Stats().Applied >= 1 })
	e.exact(map[int64]usage{5: {count: 2, last: &at}})
}
