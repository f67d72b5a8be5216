package projections

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
)

// Config of a Runner.
type Config struct {
	Bus      kafka.Config
	Registry *events.Registry
	// Signer verifies every message body; a message whose signature is
	// missing or wrong is dead-lettered, never applied.
	Signer *events.Signer
	// BatchSize bounds the events applied in one transaction; default 2000
	// (at 500 the fixed cost of a transaction and its checkpoint statements
	// cost a fifth of the throughput in BenchmarkProjectionApply).
	BatchSize int
	// BatchAttempts is how often a batch whose handler fails is tried
	// before its events are applied one at a time; default 3.
	BatchAttempts int
	// EventAttempts is how often one event whose handler fails is tried
	// before it is dead-lettered; default 5. Errors of the database or the
	// connection are retried without limit: they say nothing about the event.
	EventAttempts int
	// Backoff is the first retry delay, doubled up to MaxBackoff; defaults
	// 50ms and 5s.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// GapAlarm is how long an event may wait for a missing earlier version
	// of its stream before that is logged as an error and counted; default
	// 10s. It keeps waiting: an event is never skipped for a gap.
	GapAlarm time.Duration
	// LockTimeout bounds how long a batch waits for a row lock held by
	// another batch (say, two partitions creating the same shared row)
	// before it is rolled back and retried; such waits can deadlock, and
	// Postgres would take a second to notice. Default 200ms.
	LockTimeout time.Duration
	// Metrics, when set, registers the runner's counters and lag gauges.
	Metrics prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = 2000
	}
	if c.BatchAttempts == 0 {
		c.BatchAttempts = 3
	}
	if c.EventAttempts == 0 {
		c.EventAttempts = 5
	}
	if c.Backoff == 0 {
		c.Backoff = 50 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 5 * time.Second
	}
	if c.GapAlarm == 0 {
		c.GapAlarm = 10 * time.Second
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = defaultLockTimeout
	}
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if err := c.Bus.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("projections: %w", err))
	}
	if c.Registry == nil {
		errs = append(errs, errors.New("projections: no event registry"))
	}
	if c.Signer == nil {
		errs = append(errs, errors.New("projections: no event signer (every message must be verified)"))
	}
	if c.BatchSize < 1 || c.BatchAttempts < 1 || c.EventAttempts < 1 {
		errs = append(errs, errors.New("projections: batch size and attempts must be at least 1"))
	}
	if c.Backoff <= 0 || c.MaxBackoff < c.Backoff {
		errs = append(errs, errors.New("projections: backoff must be positive and at most the max backoff"))
	}
	if c.GapAlarm <= 0 {
		errs = append(errs, errors.New("projections: gap alarm must be positive"))
	}
	if c.LockTimeout < time.Millisecond {
		errs = append(errs, errors.New("projections: lock timeout must be at least 1ms"))
	}
	return errors.Join(errs...)
}

// Runner feeds groups of projections from the events topic.
type Runner struct {
	cfg     Config
	pool    *pgxpool.Pool
	log     *slog.Logger
	metrics *runnerMetrics
	// waiting is, per group (a *process.Health), why it waits for a
	// newer cfgd (kafka.YieldError).
	waiting sync.Map
}

// Ready fails while a group holds a partition at an event only a newer
// cfgd understands ("waiting for a newer cfgd: <type> v<N>"): the group
// left its consumer group for a newer replica to apply it.
func (r *Runner) Ready(ctx context.Context) error {
	var errs []error
	r.waiting.Range(func(name, h any) bool {
		if err := h.(*process.Health).Ready(ctx); err != nil {
			errs = append(errs, fmt.Errorf("projections %s: %w", name, err))
		}
		return true
	})
	return errors.Join(errs...)
}

type runnerMetrics struct {
	events      *prometheus.CounterVec
	failed      *prometheus.CounterVec
	deadletters *prometheus.CounterVec
	gaps        *prometheus.CounterVec
}

// NewRunner builds a runner.
func NewRunner(cfg Config, pool *pgxpool.Pool, log *slog.Logger) (*Runner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, pool: pool, log: log.With("component", "projections"), metrics: &runnerMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cfgd_projection_events_total", Help: "Events passed by a projection, by outcome.",
		}, []string{"projection", "outcome"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cfgd_projection_errors_total", Help: "Failed attempts to apply a batch or an event (each is retried).",
		}, []string{"group"}),
		deadletters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cfgd_projection_deadletters_total", Help: "Events sent to the dead-letter topic, by projection (the group for messages refused before any projection saw them) and reason.",
		}, []string{"projection", "reason"}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cfgd_projection_gaps_total", Help: "Times events waited longer than the gap alarm for a missing earlier version of their stream.",
		}, []string{"group"}),
	}}
	if cfg.Metrics != nil {
		m := r.metrics
		for _, c := range []prometheus.Collector{m.events, m.failed, m.deadletters, m.gaps} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("projection metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Run consumes until ctx ends, each group in its own consumer group. A
// batch is applied in one transaction with the checkpoints, and its offsets
// are marked for commit only after that transaction committed.
func (r *Runner) Run(ctx context.Context, groups ...Group) error {
	var errs []error
	seen := map[string]string{}
	for _, g := range groups {
		if err := g.Validate(); err != nil {
			errs = append(errs, err)
		}
		for _, p := range g.Projections {
			if other, ok := seen[p.Name]; ok {
				errs = append(errs, fmt.Errorf("projection %s is in groups %s and %s", p.Name, other, g.Name))
			}
			seen[p.Name] = g.Name
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(groups) == 0 {
		return nil
	}

	// applied is the highest global position each projection passed in
	// this process; flushed to projection_positions once a second rather
	// than in every batch, where one hot row per projection would
	// serialise all partitions.
	applied := map[string]*atomic.Int64{}
	for _, g := range groups {
		for _, p := range g.Projections {
			applied[p.Name] = new(atomic.Int64)
			if r.cfg.Metrics != nil {
				if err := r.registerLag(p.Name); err != nil {
					return err
				}
			}
		}
	}
	flushDone := make(chan struct{})
	flushCtx, stopFlush := context.WithCancel(ctx)
	go func() {
		defer close(flushDone)
		r.flushPositions(flushCtx, applied)
	}()
	defer func() {
		stopFlush()
		<-flushDone
	}()

	eg, ctx := errgroup.WithContext(ctx)
	for _, g := range groups {
		h := &groupHandler{r: r, g: g, applied: applied, log: r.log.With("group", g.Name)}
		waiting := &process.Health{}
		r.waiting.Store(g.Name, waiting)
		opts := []kafka.ConsumeOption{kafka.WithBatch(r.cfg.BatchSize, 0), kafka.WithRetry(r.cfg.Backoff, r.cfg.MaxBackoff),
			kafka.WithDeadLetter(kafka.TopicDeadLetters), kafka.WithLog(h.log), kafka.WithWaiting(waiting)}
		if r.cfg.Metrics != nil {
			opts = append(opts, kafka.WithMetrics(r.cfg.Metrics))
		}
		eg.Go(func() error {
			return kafka.Consume(ctx, r.cfg.Bus, g.ConsumerGroup(), []string{kafka.TopicEvents}, h.handle, opts...)
		})
	}
	return eg.Wait()
}

// groupHandler applies the batches of one group; handle runs once per
// batch of one partition, the partitions concurrently.
type groupHandler struct {
	r       *Runner
	g       Group
	applied map[string]*atomic.Int64
	log     *slog.Logger
}

// held is what a partition keeps between batches: events waiting for a
// missing earlier version of their stream (the events of their stream
// behind them wait too).
type held struct {
	ds      []*delivery
	since   time.Time
	alarmed bool
}

// handle applies a batch of one partition together with the events held
// from earlier batches, which are retried with every following batch. The
// offset committed stops at the oldest held event, so a restart re-reads
// from there.
func (h *groupHandler) handle(ctx context.Context, b *kafka.Batch) error {
	cfg := h.r.cfg
	st, _ := b.Held().(*held)
	ds, newer, err := h.prepare(ctx, b)
	if err != nil {
		return err // ctx ended; nothing of the batch is committed
	}
	var waiting []*delivery
	if st != nil {
		waiting = st.ds
	}
	waiting, err = h.apply(ctx, b, append(waiting, ds...))
	if err != nil {
		return err
	}
	// A record only a newer cfgd understands: what came before it is
	// applied; it and what follows wait for a newer member of the group
	// (the loop commits no further than it, or than the events held).
	yield := func() error {
		if newer == nil {
			return nil
		}
		h.log.Warn("an event only a newer cfgd understands: holding the partition for a newer member of the group",
			"type", newer.cause.Type, "version", newer.cause.Version, "partition", newer.src.Partition, "offset", newer.src.Offset)
		return kafka.Yield(newer.cause, newer.src)
	}
	if len(waiting) == 0 {
		return yield()
	}
	if st == nil {
		st = &held{since: time.Now()}
	}
	st.ds = waiting
	if !st.alarmed && time.Since(st.since) > cfg.GapAlarm {
		st.alarmed = true
		h.r.metrics.gaps.WithLabelValues(h.g.Name).Inc()
		d := waiting[0]
		h.log.Error("events are waiting for a missing earlier version of their stream; the relay must never publish out of order, check it and the topic",
			"stream", d.env.Stream, "version", d.env.Version, "partition", d.src.Partition, "offset", d.src.Offset,
			"held", len(waiting), "since", st.since)
	}
	// Too much held: stop reading until the gap closes.
	b.Hold(st, waiting[0].src.Offset, len(waiting) >= 10*cfg.BatchSize)
	return yield()
}

// newerRecord is the first record of a batch only a newer cfgd
// understands.
type newerRecord struct {
	src   *sarama.ConsumerMessage
	cause *events.ErrNewerSchema
}

// prepare verifies and decodes messages. A message that fails the
// signature check or does not decode as an envelope is dead-lettered for
// the whole group and dropped: its stream and version cannot be trusted, so
// no checkpoint moves for it. An envelope whose payload does not decode is
// dead-lettered for each projection that handles its type, and passes them
// by. An envelope only a newer cfgd understands (Registry.Check: a newer
// version of a type the group handles, or a type a build of a higher
// schema level wrote, which may concern the group) ends the batch: it is
// returned as newer, and neither it nor what follows is prepared. A type
// no build up to this one's level knows moves only the checkpoints.
func (h *groupHandler) prepare(ctx context.Context, b *kafka.Batch) ([]*delivery, *newerRecord, error) {
	out := make([]*delivery, 0, len(b.Messages))
	for _, m := range b.Messages {
		src := m
		if err := h.r.cfg.Signer.Verify(m.Value, header(m.Headers, events.HeaderSignature)); err != nil {
			if err := h.deadLetter(ctx, b, src, h.g.Name, kafka.ReasonBadSignature, err); err != nil {
				return nil, nil, err
			}
			continue
		}
		env, err := events.Unmarshal(m.Value)
		if err != nil {
			if err := h.deadLetter(ctx, b, src, h.g.Name, kafka.ReasonUndecodable, err); err != nil {
				return nil, nil, err
			}
			continue
		}
		level := events.ParseSchemaHeader(header(m.Headers, events.HeaderSchemaLevel))
		var ns *events.ErrNewerSchema
		if err := h.r.cfg.Registry.Check(env.Type, max(env.Metadata.SchemaVersion, 1), level); errors.As(err, &ns) &&
			(!h.r.cfg.Registry.Known(env.Type) || h.handles(env.Type)) {
			return out, &newerRecord{src: src, cause: ns}, nil
		}
		d := &delivery{env: env, src: src}
		if !h.handles(env.Type) {
			// Only the checkpoint moves: no need to decode the payload.
			out = append(out, d)
			continue
		}
		ev, err := h.r.cfg.Registry.Decode(env)
		var unknown *events.ErrUnknownType
		switch {
		case errors.As(err, &unknown):
		case err != nil:
			for _, p := range h.g.Projections {
				if !p.Handles(env.Type) {
					continue
				}
				if err := h.deadLetter(ctx, b, src, p.Name, kafka.ReasonUndecodable, err); err != nil {
					return nil, nil, err
				}
				d.markDead(p.Name, kafka.ReasonUndecodable)
			}
		default:
			d.ev = ev
		}
		out = append(out, d)
	}
	return out, nil, nil
}

func (h *groupHandler) handles(typ string) bool {
	for _, p := range h.g.Projections {
		if p.Handles(typ) {
			return true
		}
	}
	return false
}

func (d *delivery) markDead(projection, reason string) {
	if d.dead == nil {
		d.dead = map[string]string{}
	}
	d.dead[projection] = reason
}

// apply applies batch with retries and returns the held events. A
// transient failure (database, connection, a concurrent checkpoint) retries
// the batch without limit. A handler that keeps failing rolls the batch
// back each time; after BatchAttempts the events are applied one at a
// time, so one poison event is found, dead-lettered, and passed by, while
// every other event of the batch is applied exactly once.
func (h *groupHandler) apply(ctx context.Context, b *kafka.Batch, batch []*delivery) ([]*delivery, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	bo := process.Backoff(h.r.cfg.Backoff, h.r.cfg.MaxBackoff)
	for handlerFailures := 0; ; {
		res, err := applyBatch(ctx, h.r.pool, h.r.cfg.LockTimeout, h.g.ConsumerGroup(), h.g.Projections, batch)
		if err == nil {
			h.record(res)
			return res.held, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		h.failed(err, len(batch))
		var he *HandlerError
		if errors.As(err, &he) && !transient(err) {
			handlerFailures++
			if handlerFailures >= h.r.cfg.BatchAttempts {
				break
			}
		}
		if !process.Wait(ctx, bo) {
			return nil, ctx.Err()
		}
	}
	var waiting []*delivery
	for _, d := range batch {
		hs, err := h.applyOne(ctx, b, d)
		if err != nil {
			return nil, err
		}
		waiting = append(waiting, hs...)
	}
	return waiting, nil
}

func (h *groupHandler) applyOne(ctx context.Context, b *kafka.Batch, d *delivery) ([]*delivery, error) {
	bo := process.Backoff(h.r.cfg.Backoff, h.r.cfg.MaxBackoff)
	for handlerFailures := 0; ; {
		res, err := applyBatch(ctx, h.r.pool, h.r.cfg.LockTimeout, h.g.ConsumerGroup(), h.g.Projections, []*delivery{d})
		if err == nil {
			h.record(res)
			return res.held, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		h.failed(err, 1)
		var he *HandlerError
		if errors.As(err, &he) && !transient(err) {
			handlerFailures++
			// A handler error while the database is unreachable says
			// nothing about the event.
			if handlerFailures >= h.r.cfg.EventAttempts && h.r.pool.Ping(ctx) == nil {
				if err := h.deadLetter(ctx, b, d.src, he.Projection, kafka.ReasonHandler, he.Err); err != nil {
					return nil, err
				}
				d.markDead(he.Projection, kafka.ReasonHandler)
				handlerFailures = 0
				continue
			}
		}
		if !process.Wait(ctx, bo) {
			return nil, ctx.Err()
		}
	}
}

// deadLetter sends src to kafka.TopicDeadLetters and counts it.
//
// Giving up on version N of a stream moves the projection's checkpoint past
// N, as for an event it has no handler for: the later events of the stream
// are applied, and Wait treats N as seen. The read model then lacks N's
// effect; the dead letter (and cfgd_projection_deadletters_total) is the
// record of that, and replaying the projection after a fix restores it.
// A message refused for its signature or an unreadable envelope moves no
// checkpoint: its stream and version cannot be trusted.
func (h *groupHandler) deadLetter(ctx context.Context, b *kafka.Batch, src *sarama.ConsumerMessage, projection, reason string, cause error) error {
	if err := b.DeadLetter(ctx, src, projection, reason, cause); err != nil {
		return err
	}
	h.r.metrics.deadletters.WithLabelValues(projection, reason).Inc()
	return nil
}

func (h *groupHandler) failed(err error, n int) {
	h.r.metrics.failed.WithLabelValues(h.g.Name).Inc()
	h.log.Warn("projection batch failed; retrying", "events", n, "err", err)
}

func (h *groupHandler) record(res batchResult) {
	for name, counts := range res.outcomes {
		for o, n := range counts {
			if n > 0 && Outcome(o) != Held {
				h.r.metrics.events.WithLabelValues(name, Outcome(o).String()).Add(float64(n))
			}
		}
	}
	for name, pos := range res.maxPos {
		storeMax(h.applied[name], pos)
	}
}

// transient tells whether err is about the database or the connection
// rather than the event: such errors are retried without limit.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "40", "53", "57", "58": // connection, rollback (serialization, deadlock), resources, shutdown, system
			return true
		}
		return pgErr.Code == "55P03" // lock_not_available: LockTimeout
	}
	var netErr net.Error
	return errors.Is(err, errCheckpointRace) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func header(hs []*sarama.RecordHeader, name string) string {
	for _, h := range hs {
		if h != nil && string(h.Key) == name {
			return string(h.Value)
		}
	}
	return ""
}

// flushPositions writes the in-memory applied positions every second, and
// once more on the way out.
func (r *Runner) flushPositions(ctx context.Context, applied map[string]*atomic.Int64) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	flushed := map[string]int64{}
	flush := func(ctx context.Context) {
		for name, pos := range applied {
			v := pos.Load()
			if v == 0 || flushed[name] == v {
				continue
			}
			if _, err := r.pool.Exec(ctx, `
				INSERT INTO projection_positions (projection, position, updated_at) VALUES ($1, $2, now())
				ON CONFLICT (projection) DO UPDATE SET position = greatest(projection_positions.position, excluded.position), updated_at = now()`,
				name, v); err != nil {
				r.log.Warn("projection position flush", "projection", name, "err", err)
				continue
			}
			flushed[name] = v
		}
	}
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			flush(final)
			cancel()
			return
		case <-t.C:
			flush(ctx)
		}
	}
}

// registerLag exposes how far a projection trails the event store, in
// global positions.
func (r *Runner) registerLag(name string) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cfgd_projection_lag_events", Help: "Highest stored event position minus the projection's highest applied position.",
		ConstLabels: prometheus.Labels{"projection": name},
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var lag int64
		err := r.pool.QueryRow(ctx, `
			SELECT coalesce((SELECT max(position) FROM events), 0)
			     - coalesce((SELECT position FROM projection_positions WHERE projection = $1), 0)`, name).Scan(&lag)
		if err != nil {
			return -1
		}
		return float64(lag)
	})
	if err := r.cfg.Metrics.Register(g); err != nil && !alreadyRegistered(err) {
		return fmt.Errorf("projection %s lag metric: %w", name, err)
	}
	return nil
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
