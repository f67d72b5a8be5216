package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"
	"golang.org/x/sync/semaphore"

	"github.com/cfgd/cfgd/events"
)

// Producer defaults, used where Config leaves them zero.
const (
	DefaultCompression     = "lz4"
	DefaultMaxMessageBytes = 1_000_000 // sarama's and Kafka's own default
)

// ProducerOptions say how patient one producer is; what every producer
// shares (idempotence, acks, compression, size limit) comes from Config.
type ProducerOptions struct {
	// Retries and RetryBackoff bound how long sarama retries a record
	// before it reports it failed. Defaults 10 and 200ms. With
	// RetryBackoffMax the backoff doubles after each try, from
	// RetryBackoff up to RetryBackoffMax, so that retries spent at once
	// (connections refused) still span a broker's restart.
	Retries         int
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// Timeout bounds connecting, and each produce request; it also spaces
	// reconnects after a failed one. 0: sarama's defaults, no spacing.
	Timeout time.Duration
	// Linger is how long records wait to be packed into one request
	// (0: sent as soon as the previous request is answered).
	Linger time.Duration
	// MaxMessageBytes overrides Config.MaxMessageBytes for this producer
	// (0: Config's).
	MaxMessageBytes int
	// MaxInFlightBytes bounds the record values handed to Kafka and not
	// acknowledged yet; past it Send fails (0: no bound).
	MaxInFlightBytes int64
	// Topics (before Config.TopicPrefix) are created on connect.
	Topics []string
}

// producerSarama is the one producer construction. Every producer is
// idempotent with acks from all in-sync replicas and one request in
// flight, so a retried send neither loses nor duplicates a record and
// each partition keeps its order; records are compressed and bounded in
// size as Config says. Records with a key go to the key's partition,
// records without one to a random partition.
func (c Config) producerSarama(o ProducerOptions) (*sarama.Config, error) {
	s := c.Sarama()
	s.Producer.RequiredAcks = sarama.WaitForAll
	s.Producer.Idempotent = true
	s.Net.MaxOpenRequests = 1
	if err := s.Producer.Compression.UnmarshalText([]byte(c.compression())); err != nil {
		return nil, fmt.Errorf("kafka compression %q: %w", c.Compression, err)
	}
	s.Producer.MaxMessageBytes = c.maxMessageBytes()
	if o.MaxMessageBytes > 0 {
		s.Producer.MaxMessageBytes = o.MaxMessageBytes
	}
	s.Producer.Retry.Max = o.Retries
	s.Producer.Retry.Backoff = o.RetryBackoff
	if o.Retries == 0 {
		s.Producer.Retry.Max = 10
	}
	if o.RetryBackoff == 0 {
		s.Producer.Retry.Backoff = 200 * time.Millisecond
	}
	if first, most := s.Producer.Retry.Backoff, o.RetryBackoffMax; most > first {
		s.Producer.Retry.BackoffFunc = func(retries, _ int) time.Duration {
			return min(first<<min(retries, 20), most)
		}
	}
	s.Producer.Return.Successes = true
	s.Producer.Return.Errors = true
	s.Producer.Partitioner = sarama.NewHashPartitioner
	if o.Linger > 0 {
		s.Producer.Flush.Frequency = o.Linger
		s.Producer.Flush.Bytes = 512 << 10
	}
	if o.Timeout > 0 {
		// Give up quickly on an unreachable broker, so the caller can
		// answer 503 instead of queueing without bound.
		s.Producer.Timeout = o.Timeout
		s.Net.DialTimeout = o.Timeout
		s.Net.ReadTimeout = 5 * o.Timeout
		s.Net.WriteTimeout = 5 * o.Timeout
		s.Metadata.Retry.Max = 1
		s.Metadata.Retry.Backoff = 100 * time.Millisecond
		s.ChannelBufferSize = 64
	}
	return s, nil
}

func (c Config) compression() string {
	if c.Compression == "" {
		return DefaultCompression
	}
	return c.Compression
}

func (c Config) maxMessageBytes() int {
	if c.MaxMessageBytes == 0 {
		return DefaultMaxMessageBytes
	}
	return c.MaxMessageBytes
}

// ErrUnavailable is returned by Send when Kafka did not take the records
// in time or the producer cannot connect; edges answer 503 / Unavailable.
var ErrUnavailable = errors.New("kafka is unavailable")

// Producer is cfgd's one Kafka producer: every record sent to Kafka goes
// through one (events, request logs, task lifecycle records, dead
// letters). It connects on first use, and again after a failure, so a
// process starts while Kafka is down; Send waits for the acknowledgements
// of its records, Enqueue does not.
type Producer struct {
	c        Config
	o        ProducerOptions
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
}

// NewProducer returns a producer on c's brokers; it does not connect yet.
func NewProducer(c Config, o ProducerOptions, log *slog.Logger) (*Producer, error) {
	if _, err := c.producerSarama(o); err != nil {
		return nil, err
	}
	p := &Producer{c: c, o: o, log: log}
	if o.MaxInFlightBytes > 0 {
		p.inFlight = semaphore.NewWeighted(o.MaxInFlightBytes)
	}
	return p, nil
}

// PublishError reports a Send of which only some records were stored.
// Records after a failed one may be stored too (they are all handed to
// Kafka at once), so a caller that keeps order re-sends from the first
// failed record on.
type PublishError struct {
	Failed []int // indexes into the records given to Send, ascending
	Total  int
	Err    error // the first failure's cause
}

func (e *PublishError) Error() string {
	return fmt.Sprintf("produce: %d of %d messages failed, the first at %d: %v", len(e.Failed), e.Total, e.Failed[0], e.Err)
}

func (e *PublishError) Unwrap() error { return e.Err }

// FirstFailed is the index of the first record that was not stored; every
// record before it was.
func (e *PublishError) FirstFailed() int { return e.Failed[0] }

// waiter collects the acknowledgements of one Send.
type waiter struct {
	total     int32
	remaining atomic.Int32
	mu        sync.Mutex
	failed    []int
	errs      map[int]error
	done      chan struct{}
}

func (w *waiter) finish(i int, err error) {
	if err != nil {
		w.mu.Lock()
		w.failed = append(w.failed, i)
		w.errs[i] = err
		w.mu.Unlock()
	}
	if w.remaining.Add(-1) == 0 {
		close(w.done)
	}
}

// pending is the Metadata of one record in flight.
type pending struct {
	w    *waiter // nil for Enqueue
	i    int
	size int64
}

// Send hands msgs to Kafka and returns once Kafka stored them all, or
// with an error: *PublishError when some failed, one wrapping
// ErrUnavailable when Kafka did not answer before ctx ended or cannot be
// reached. Each message's Topic is a full name (Config.Topic).
func (p *Producer) Send(ctx context.Context, msgs ...*sarama.ProducerMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	// Held before the producer is fetched: Close, which takes it
	// exclusively, must not shut the input between fetch and send.
	p.sending.RLock()
	defer p.sending.RUnlock()
	ap, err := p.producer(ctx)
	if err != nil {
		return err
	}
	w := &waiter{total: int32(len(msgs)), done: make(chan struct{}), errs: map[int]error{}}
	w.remaining.Store(int32(len(msgs)))
	for i, m := range msgs {
		size := int64(m.Value.Length())
		if p.inFlight != nil {
			if err := p.inFlight.Acquire(ctx, size); err != nil {
				return w.inDoubt(i, p.unavailable(ctx, "in-flight limit reached", err))
			}
		}
		m.Metadata = pending{w: w, i: i, size: size}
		select {
		case ap.Input() <- m:
		case <-ctx.Done():
			p.release(size)
			return w.inDoubt(i, p.unavailable(ctx, "producer queue full", ctx.Err()))
		}
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		return w.inDoubt(len(msgs), p.unavailable(ctx, "no acknowledgement in time", ctx.Err()))
	}
	return w.result()
}

// result is the error of a Send once every record has its final result.
func (w *waiter) result() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failed) == 0 {
		return nil
	}
	failed := slices.Sorted(slices.Values(w.failed))
	return &PublishError{Failed: failed, Total: int(w.total), Err: w.errs[failed[0]]}
}

// inDoubt is err, the failure of a Send that handed its first handed
// records to sarama: as an *InDoubtError when it handed any (the records
// after them were never handed, so they are failed now).
func (w *waiter) inDoubt(handed int, err error) error {
	if handed == 0 {
		return err
	}
	for i := handed; i < int(w.total); i++ {
		w.finish(i, err)
	}
	return &InDoubtError{err: err, w: w}
}

// InDoubtError is the failure of a Send that ended (its ctx) before Kafka
// answered for every record it handed over: it wraps ErrUnavailable, and
// those records may still be stored, since sarama keeps retrying them.
// Settled tells, once sarama has given each its final result, which were
// stored: a caller that must not store a record twice (an idempotency
// key) waits for that before it lets the records be sent again.
type InDoubtError struct {
	err error
	w   *waiter
}

func (e *InDoubtError) Error() string { return e.err.Error() }
func (e *InDoubtError) Unwrap() error { return e.err }

// Settled waits until every record of the Send has its final result
// (stored, or failed once sarama's retries are spent: Retries times
// RetryBackoff and Timeout, and at once when the producer closes), or ctx
// ends: nil when Kafka stored them all, a *PublishError naming those it
// did not (those never handed over among them), else ctx's error.
func (e *InDoubtError) Settled(ctx context.Context) error {
	select {
	case <-e.w.done:
		return e.w.result()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Connect connects now (creating the producer's topics) instead of on
// the first send, for a process that should wait for Kafka at start.
func (p *Producer) Connect(ctx context.Context) error {
	p.sending.RLock()
	defer p.sending.RUnlock()
	_, err := p.producer(ctx)
	return err
}

// Enqueue hands m to Kafka without waiting: sarama batches and retries it,
// and a record finally given up is logged. It fails only when the
// producer cannot connect.
func (p *Producer) Enqueue(ctx context.Context, m *sarama.ProducerMessage) error {
	p.sending.RLock()
	defer p.sending.RUnlock()
	ap, err := p.producer(ctx)
	if err != nil {
		return err
	}
	m.Metadata = pending{size: 0}
	ap.Input() <- m
	return nil
}

func (p *Producer) unavailable(ctx context.Context, why string, err error) error {
	p.log.WarnContext(ctx, "kafka produce failed", "why", why, "err", err)
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, why, err)
}

func (p *Producer) release(size int64) {
	if p.inFlight != nil {
		p.inFlight.Release(size)
	}
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
	if p.dialErr != nil && time.Since(p.lastDial) < p.o.Timeout {
		return nil, p.dialErr
	}
	p.lastDial = time.Now()
	ap, err := p.connect(ctx)
	if err != nil {
		p.dialErr = fmt.Errorf("%w: %w", ErrUnavailable, err)
		p.log.WarnContext(ctx, "kafka unreachable", "err", err)
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
		if len(p.o.Topics) > 0 {
			if err := EnsureTopics(ctx, p.c, p.log, p.o.Topics...); err != nil {
				ch <- result{err: err}
				return
			}
		}
		sc, err := p.c.producerSarama(p.o)
		if err != nil {
			ch <- result{err: err}
			return
		}
		ap, err := sarama.NewAsyncProducer(p.c.Brokers, sc)
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
		pd, _ := m.Metadata.(pending)
		p.release(pd.size)
		if pd.w != nil {
			pd.w.finish(pd.i, nil)
		}
	}
}

func (p *Producer) drainErrors(ap sarama.AsyncProducer) {
	defer p.done.Done()
	for e := range ap.Errors() {
		pd, _ := e.Msg.Metadata.(pending)
		p.release(pd.size)
		if pd.w != nil {
			pd.w.finish(pd.i, e.Err)
		} else {
			p.log.Error("kafka record lost", "topic", e.Msg.Topic, "err", e.Err)
		}
		if errors.Is(e.Err, breaker.ErrBreakerOpen) {
			p.retire(ap)
		}
	}
}

// retire drops ap once sarama's circuit breaker has opened in it (after a
// few failed leader lookups while Kafka was down). The breaker refuses
// every record for 10 s whether or not Kafka is back, so the ingest
// endpoints would answer 503 that long while /readyz, which asks Kafka
// itself, says ready. The next Send connects a fresh producer instead (at
// most once per Timeout while Kafka is still down).
func (p *Producer) retire(ap sarama.AsyncProducer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ap != ap {
		return
	}
	p.ap = nil
	p.log.Warn("kafka producer reset after Kafka refused it; reconnecting on the next send")
	go func() {
		// AsyncClose shuts ap's input, so no Send may be sending into it;
		// it flushes or fails what ap still holds, and its drain
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
	p.ap = nil // closed once, also when Close is called again
	p.mu.Unlock()
	if ap != nil {
		ap.AsyncClose()
	}
	// No Send sends from here on (closed is set), so the lock can go: a
	// producer that retire is still closing takes it to do so, and only
	// then do its drain goroutines end.
	p.sending.Unlock()
	p.done.Wait()
	return nil
}

// SchemaHeaders are the schema headers (events.HeaderSchemaLevel,
// events.HeaderSchemaVersion) of a record of format version version that
// this build writes, so a reader of an older build can tell it needs a
// newer cfgd instead of skipping the record.
func SchemaHeaders(version int) []sarama.RecordHeader {
	h := events.SchemaHeaders(version)
	return []sarama.RecordHeader{
		{Key: []byte(events.HeaderSchemaLevel), Value: []byte(h[events.HeaderSchemaLevel])},
		{Key: []byte(events.HeaderSchemaVersion), Value: []byte(h[events.HeaderSchemaVersion])},
	}
}
