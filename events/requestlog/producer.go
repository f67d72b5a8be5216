package requestlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"
	"golang.org/x/sync/semaphore"

	"github.com/cfgd/cfgd/events/kafka"
)

// ErrUnavailable is returned by Produce when Kafka did not take the events
// in time; edges answer 503 / Unavailable.
var ErrUnavailable = errors.New("request-log topic is unavailable")

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

// Producer writes request-log events to their Kafka topic. It connects on
// first use (and again after a failure, at most once per Timeout), so cfgd
// starts while Kafka is down and its ingest endpoints answer 503 until
// Kafka is back.
type Producer struct {
	cfg      ProducerConfig
	topic    string
	log      *slog.Logger
	inFlight *semaphore.Weighted

	// sending is held (shared) while records go into the producer's input,
	// which Close must not shut under a sender.
	sending  sync.RWMutex
	mu       sync.Mutex
	ap       sarama.AsyncProducer
	lastDial time.Time
	dialErr  error
	done     sync.WaitGroup
	closed   bool

	produced atomic.Int64
}

// NewProducer returns a producer; it does not connect yet.
func NewProducer(cfg ProducerConfig, log *slog.Logger) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Producer{cfg: cfg, topic: cfg.Bus.Topic(kafka.TopicRequestLogs), log: log, inFlight: semaphore.NewWeighted(cfg.MaxInFlightBytes)}, nil
}

// Topic is the full name of the topic events go to.
func (p *Producer) Topic() string { return p.topic }

// Produced counts the events Kafka acknowledged.
func (p *Producer) Produced() int64 { return p.produced.Load() }

// waiter collects the acknowledgements of one Produce call.
type waiter struct {
	remaining atomic.Int32
	failed    atomic.Pointer[error]
	done      chan struct{}
}

func (w *waiter) finish(err error) {
	if err != nil {
		w.failed.CompareAndSwap(nil, &err)
	}
	if w.remaining.Add(-1) == 0 {
		close(w.done)
	}
}

// pending is the Metadata of one Kafka record.
type pending struct {
	w      *waiter
	size   int64
	events int
}

// Produce hands events (already validated) to Kafka and returns once Kafka
// has stored them all, or with an error wrapping ErrUnavailable after at
// most the configured Timeout. After an error some of the events may still
// have been stored.
func (p *Producer) Produce(ctx context.Context, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	// Held before the producer is fetched: Close, which takes it
	// exclusively, must not shut the input between fetch and send.
	p.sending.RLock()
	defer p.sending.RUnlock()
	ap, err := p.producer(ctx)
	if err != nil {
		return err
	}
	chunks := (len(events) + p.cfg.PackEvents - 1) / p.cfg.PackEvents
	w := &waiter{done: make(chan struct{})}
	w.remaining.Store(int32(chunks))
	for i := 0; i < len(events); i += p.cfg.PackEvents {
		chunk := events[i:min(i+p.cfg.PackEvents, len(events))]
		buf := AppendBatch(make([]byte, 0, len(chunk)*160), chunk)
		size := int64(len(buf))
		if err := p.inFlight.Acquire(ctx, size); err != nil {
			return p.unavailable(ctx, "in-flight limit reached", err)
		}
		msg := &sarama.ProducerMessage{Topic: p.topic, Value: sarama.ByteEncoder(buf), Metadata: pending{w: w, size: size, events: len(chunk)}}
		select {
		case ap.Input() <- msg:
		case <-ctx.Done():
			p.inFlight.Release(size)
			return p.unavailable(ctx, "producer queue full", ctx.Err())
		}
	}
	select {
	case <-w.done:
		if perr := w.failed.Load(); perr != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, *perr)
		}
		return nil
	case <-ctx.Done():
		return p.unavailable(ctx, "no acknowledgement in time", ctx.Err())
	}
}

func (p *Producer) unavailable(ctx context.Context, why string, err error) error {
	p.log.WarnContext(ctx, "request-log produce failed", "why", why, "err", err)
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, why, err)
}

// producer returns the connected async producer, connecting if needed.
func (p *Producer) producer(ctx context.Context) (sarama.AsyncProducer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("%w: producer closed", ErrUnavailable)
	}
	if p.ap != nil {
		return p.ap, nil
	}
	if time.Since(p.lastDial) < p.cfg.Timeout && p.dialErr != nil {
		return nil, p.dialErr
	}
	p.lastDial = time.Now()
	ap, err := p.connect(ctx)
	if err != nil {
		p.dialErr = fmt.Errorf("%w: %w", ErrUnavailable, err)
		p.log.WarnContext(ctx, "kafka unreachable for request logs", "err", err)
		return nil, p.dialErr
	}
	p.ap, p.dialErr = ap, nil
	p.done.Add(2)
	go p.drainSuccesses(ap)
	go p.drainErrors(ap)
	return ap, nil
}

func (p *Producer) connect(ctx context.Context) (sarama.AsyncProducer, error) {
	type result struct {
		ap  sarama.AsyncProducer
		err error
	}
	ch := make(chan result, 1)
	// sarama's constructors take no context; the dial timeout bounds them,
	// and a late success is closed rather than leaked.
	go func() {
		err := kafka.EnsureTopics(ctx, p.cfg.Bus, p.log, kafka.TopicRequestLogs)
		if err != nil {
			ch <- result{err: err}
			return
		}
		ap, err := sarama.NewAsyncProducer(p.cfg.Bus.Brokers, p.cfg.Bus.BulkProducerSarama(p.cfg.Timeout))
		ch <- result{ap, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("kafka producer: %w", r.err)
		}
		return r.ap, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.ap != nil {
				r.ap.AsyncClose()
			}
		}()
		return nil, fmt.Errorf("kafka producer: %w", ctx.Err())
	}
}

func (p *Producer) drainSuccesses(ap sarama.AsyncProducer) {
	defer p.done.Done()
	for m := range ap.Successes() {
		pd := m.Metadata.(pending)
		p.inFlight.Release(pd.size)
		p.produced.Add(int64(pd.events))
		pd.w.finish(nil)
	}
}

func (p *Producer) drainErrors(ap sarama.AsyncProducer) {
	defer p.done.Done()
	for e := range ap.Errors() {
		pd := e.Msg.Metadata.(pending)
		p.inFlight.Release(pd.size)
		pd.w.finish(e.Err)
		if errors.Is(e.Err, breaker.ErrBreakerOpen) {
			p.retire(ap)
		}
	}
}

// retire drops ap once sarama's circuit breaker has opened in it (after a
// few failed leader lookups while Kafka was down). The breaker refuses
// every record for 10 s whether or not Kafka is back, so the ingest
// endpoints would answer 503 that long while /readyz, which asks Kafka
// itself, says ready. The next Produce connects a fresh producer instead
// (at most once per Timeout while Kafka is still down).
func (p *Producer) retire(ap sarama.AsyncProducer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ap != ap {
		return
	}
	p.ap = nil
	p.log.Warn("request-log producer reset after Kafka refused it; reconnecting on the next request")
	go func() {
		// AsyncClose shuts ap's input, so no Produce may be sending into
		// it; it flushes or fails what ap still holds, and its drain
		// goroutines end.
		p.sending.Lock()
		defer p.sending.Unlock()
		ap.AsyncClose()
	}()
}

// Close flushes what Kafka can still take and stops the producer.
func (p *Producer) Close() error {
	p.sending.Lock()
	p.mu.Lock()
	p.closed = true
	ap := p.ap
	p.mu.Unlock()
	if ap != nil {
		ap.AsyncClose()
	}
	// No Produce sends from here on (closed is set), so the lock can go: a
	// producer that retire is still closing takes it to do so, and only
	// then do its drain goroutines end.
	p.sending.Unlock()
	p.done.Wait()
	return nil
}
