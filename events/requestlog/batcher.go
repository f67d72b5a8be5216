package requestlog

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Send delivers one batch somewhere (the Producer, or cfgd's ingest
// service); it must give up by the deadline of ctx.
type Send func(ctx context.Context, events []Event) error

// BatcherConfig configures a Batcher.
type BatcherConfig struct {
	// QueueSize bounds the events waiting to be sent (default 10000); past
	// it Report drops, so memory stays bounded whatever the sink does.
	QueueSize int
	// BatchSize is the most events in one Send (default 500).
	BatchSize int
	// FlushInterval is how long an incomplete batch waits (default 200ms).
	FlushInterval time.Duration
	// SendTimeout bounds one Send (default 2s); a batch that fails is
	// dropped and counted, never retried, so a slow sink cannot back up
	// into the callers.
	SendTimeout time.Duration
}

// DefaultBatcherConfig returns the defaults.
func DefaultBatcherConfig() BatcherConfig {
	return BatcherConfig{QueueSize: 10_000, BatchSize: 500, FlushInterval: 200 * time.Millisecond, SendTimeout: 2 * time.Second}
}

// Validate joins every problem of c.
func (c BatcherConfig) Validate() error {
	var errs []error
	if c.QueueSize < 1 {
		errs = append(errs, errors.New("requestlog batcher: QueueSize must be positive"))
	}
	if c.BatchSize < 1 || c.BatchSize > MaxBatchEvents {
		errs = append(errs, errors.New("requestlog batcher: BatchSize must be 1..10000"))
	}
	if c.FlushInterval <= 0 {
		errs = append(errs, errors.New("requestlog batcher: FlushInterval must be positive"))
	}
	if c.SendTimeout <= 0 {
		errs = append(errs, errors.New("requestlog batcher: SendTimeout must be positive"))
	}
	return errors.Join(errs...)
}

// MaxBatchEvents is the most events one ingest call (HTTP body or gRPC
// message) may carry.
const MaxBatchEvents = 10_000

// Batcher queues reported events and sends them in batches from one
// goroutine (Run). Report never blocks: when the queue is full, or the
// sink fails, events are dropped and counted. That is the trade the
// request log makes: the calls it records matter more than the record.
type Batcher struct {
	cfg   BatcherConfig
	send  Send
	log   *slog.Logger
	queue chan Event

	// closing is held (shared) by Report while it enqueues, so Run can
	// close the queue without a send on a closed channel.
	closing sync.RWMutex
	closed  bool

	sent    atomic.Int64
	dropped atomic.Int64
}

// NewBatcher returns a batcher sending through send; start Run.
func NewBatcher(cfg BatcherConfig, send Send, log *slog.Logger) (*Batcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if send == nil {
		return nil, errors.New("requestlog batcher: a send function is required")
	}
	return &Batcher{cfg: cfg, send: send, log: log, queue: make(chan Event, cfg.QueueSize)}, nil
}

// Report queues events, dropping (and counting) what does not fit.
func (b *Batcher) Report(_ context.Context, events []Event) {
	b.closing.RLock()
	defer b.closing.RUnlock()
	if b.closed {
		b.dropped.Add(int64(len(events)))
		return
	}
	for i, e := range events {
		select {
		case b.queue <- e:
		default:
			b.dropped.Add(int64(len(events) - i))
			return
		}
	}
}

// Sent counts the events the sink took.
func (b *Batcher) Sent() int64 { return b.sent.Load() }

// Dropped counts the events lost: queue full, sink failed or too slow, or
// reported after Run ended.
func (b *Batcher) Dropped() int64 { return b.dropped.Load() }

// Run sends batches until ctx ends, then sends what is queued (within
// one SendTimeout) and returns; later reports are dropped.
func (b *Batcher) Run(ctx context.Context) error {
	batch := make([]Event, 0, b.cfg.BatchSize)
	tick := time.NewTicker(b.cfg.FlushInterval)
	defer tick.Stop()
	flush := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, b.cfg.SendTimeout)
		err := b.send(sctx, batch)
		cancel()
		if err != nil {
			b.dropped.Add(int64(len(batch)))
			b.log.WarnContext(ctx, "request-log batch dropped", "events", len(batch), "dropped_total", b.dropped.Load(), "err", err)
		} else {
			b.sent.Add(int64(len(batch)))
		}
		// The sink may keep the slice (the producer encodes it first,
		// but a test sink need not), so never reuse it.
		batch = make([]Event, 0, b.cfg.BatchSize)
	}
	for {
		select {
		case e := <-b.queue:
			batch = append(batch, e)
			if len(batch) >= b.cfg.BatchSize {
				flush(ctx)
			}
		case <-tick.C:
			flush(ctx)
		case <-ctx.Done():
			b.closing.Lock()
			b.closed = true
			close(b.queue)
			b.closing.Unlock()
			// The final flush outlives ctx, bounded by one SendTimeout in
			// all so a dead sink cannot hold up shutdown.
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.SendTimeout)
			defer cancel()
			for e := range b.queue {
				batch = append(batch, e)
				if len(batch) >= b.cfg.BatchSize {
					flush(final)
				}
			}
			flush(final)
			return nil
		}
	}
}
