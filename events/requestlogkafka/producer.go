// Package requestlogkafka writes request-log events to their Kafka topic,
// packed many to a record in events/requestlog's wire format. It is apart
// from events/requestlog so that the event, its validation and the batcher
// (which api/reporter gives other Go servers) come without a Kafka client.
package requestlogkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
)

// ProducerConfig configures a Producer.
type ProducerConfig struct {
	Bus kafka.Config
	// PackEvents is how many events share one Kafka record (default 512).
	PackEvents int
	// Timeout bounds one Produce call, connecting included (default 1s).
	Timeout time.Duration
	// MaxInFlightBytes bounds the encoded events handed to Kafka and not
	// yet acknowledged (default 64 MiB); past it Produce fails.
	MaxInFlightBytes int64
	// Signer signs each record as the relay signs domain events (header
	// events.HeaderSignature over the record's value), so a broker login
	// alone cannot forge counted rows: the sinks verify with the same key.
	Signer *events.Signer
}

// DefaultProducerConfig returns the defaults for bus c.
func DefaultProducerConfig(c kafka.Config) ProducerConfig {
	return ProducerConfig{Bus: c, PackEvents: 512, Timeout: time.Second, MaxInFlightBytes: 64 << 20}
}

// Validate joins every problem of c.
func (c ProducerConfig) Validate() error {
	var errs []error
	if err := c.Bus.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.PackEvents < 1 || c.PackEvents > 4096 {
		errs = append(errs, errors.New("requestlog producer: PackEvents must be 1..4096 (the sink numbers events within a record in 12 bits)"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("requestlog producer: Timeout must be positive"))
	}
	if c.MaxInFlightBytes < 1<<20 {
		errs = append(errs, errors.New("requestlog producer: MaxInFlightBytes must be at least 1 MiB"))
	}
	return errors.Join(errs...)
}

// Producer writes request-log events to their Kafka topic, packed many
// to a record, through the one kafka.Producer. It connects on first use
// (and again after a failure, at most once per Timeout), so cfgd starts
// while Kafka is down and its ingest endpoints answer 503 until Kafka is
// back.
type Producer struct {
	cfg   ProducerConfig
	topic string
	p     *kafka.Producer

	produced atomic.Int64

	// settling counts the Settle callbacks still to run; Close waits for
	// them once closing is set (under mu), after which Settle runs its
	// callback itself.
	mu       sync.Mutex
	closing  bool
	settling sync.WaitGroup
}

// NewProducer returns a producer; it does not connect yet.
func NewProducer(cfg ProducerConfig, log *slog.Logger) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// A call waits at most Timeout, so the edges answer 503 instead of
	// queueing without bound, but a record handed over is retried for
	// longer than a broker takes to restart or a stalled one to resume:
	// 11 tries, backoff 0.1 s doubling to 4 s (23 s when every try is
	// refused at once), each waiting up to 5 x Timeout for an answer (78 s
	// at the default 1 s against a paused broker). A keyed call holds its
	// key until then (requestlog.SettleWithin), so the shorter the
	// producer's patience, the more stalls end in a record stored late
	// after its retry ran: the ambiguity Kafka cannot resolve.
	// Records linger a few milliseconds to fill large compressed batches.
	p, err := kafka.NewProducer(cfg.Bus, kafka.ProducerOptions{Retries: 10, RetryBackoff: 100 * time.Millisecond, RetryBackoffMax: 4 * time.Second, Timeout: cfg.Timeout,
		Linger: 5 * time.Millisecond, MaxMessageBytes: 4 << 20, MaxInFlightBytes: cfg.MaxInFlightBytes, Topics: []string{kafka.TopicRequestLogs}}, log)
	if err != nil {
		return nil, err
	}
	return &Producer{cfg: cfg, topic: cfg.Bus.Topic(kafka.TopicRequestLogs), p: p}, nil
}

// Topic is the full name of the topic events go to.
func (p *Producer) Topic() string { return p.topic }

// Produced counts the events Kafka acknowledged.
func (p *Producer) Produced() int64 { return p.produced.Load() }

// Produce hands events (already validated) to Kafka and returns once Kafka
// has stored them all, or with an error wrapping requestlog.ErrUnavailable after at
// most the configured Timeout. After an error some of the events may still
// have been stored: then it is a requestlog.InDoubt, whose Settle says
// which were once sarama has given up or stored each.
func (p *Producer) Produce(ctx context.Context, evs []requestlog.Event) error {
	if len(evs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	msgs := make([]*sarama.ProducerMessage, 0, (len(evs)+p.cfg.PackEvents-1)/p.cfg.PackEvents)
	for i := 0; i < len(evs); i += p.cfg.PackEvents {
		chunk := evs[i:min(i+p.cfg.PackEvents, len(evs))]
		buf := requestlog.AppendBatch(make([]byte, 0, len(chunk)*160), chunk)
		m := &sarama.ProducerMessage{Topic: p.topic, Value: sarama.ByteEncoder(buf), Headers: kafka.SchemaHeaders(requestlog.BatchVersion)}
		if p.cfg.Signer != nil {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(events.HeaderSignature), Value: []byte(p.cfg.Signer.Sign(buf))})
		}
		msgs = append(msgs, m)
	}
	if err := p.p.Send(ctx, msgs...); err != nil {
		err = fmt.Errorf("%w: %w", requestlog.ErrUnavailable, err)
		if kd, ok := errors.AsType[*kafka.InDoubtError](err); ok {
			return &inDoubt{err: err, kd: kd, p: p, events: len(evs)}
		}
		return err
	}
	p.produced.Add(int64(len(evs)))
	return nil
}

// inDoubt is the failure of a Produce whose records sarama still holds
// (requestlog.InDoubt): they may be stored yet.
type inDoubt struct {
	err    error
	kd     *kafka.InDoubtError
	p      *Producer
	events int
}

var _ requestlog.InDoubt = (*inDoubt)(nil)

func (e *inDoubt) Error() string { return e.err.Error() }
func (e *inDoubt) Unwrap() error { return e.err }

// Settle calls f once sarama has given every record its final result,
// with the events of the records it did not store, or with the error
// when that is not known within within. Close waits for f.
func (e *inDoubt) Settle(within time.Duration, f func(lost []int, err error)) {
	run := func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		err := e.kd.Settled(ctx)
		pe, partly := errors.AsType[*kafka.PublishError](err)
		if err != nil && !partly {
			f(nil, err)
			return
		}
		var lost []int
		if partly {
			for _, r := range pe.Failed {
				for i := r * e.p.cfg.PackEvents; i < min((r+1)*e.p.cfg.PackEvents, e.events); i++ {
					lost = append(lost, i)
				}
			}
		}
		e.p.produced.Add(int64(e.events - len(lost)))
		f(lost, nil)
	}
	e.p.mu.Lock()
	if e.p.closing {
		e.p.mu.Unlock()
		run()
		return
	}
	e.p.settling.Add(1)
	e.p.mu.Unlock()
	go func() {
		defer e.p.settling.Done()
		run()
	}()
}

// Close flushes what Kafka can still take and stops the producer, then
// waits for the Settle callbacks (every record has its final result once
// the producer is stopped).
func (p *Producer) Close() error {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	err := p.p.Close()
	p.settling.Wait()
	return err
}
