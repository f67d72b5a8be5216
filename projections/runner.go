package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/bus"
)

// Runner feeds projections from the events topic.
type Runner struct {
	pool    *pgxpool.Pool
	reg     *events.Registry
	bus     bus.Config
	log     *slog.Logger
	metrics *runnerMetrics
	// applied is the highest global position each projection applied in
	// this process; flushed to projection_positions once a second rather
	// than in every event's transaction, where one hot row per projection
	// would serialise all partitions.
	applied map[string]*atomic.Int64
}

type runnerMetrics struct {
	applied *prometheus.CounterVec
	failed  *prometheus.CounterVec
	reg     prometheus.Registerer
}

// NewRunner builds a runner; metrics may be nil.
func NewRunner(pool *pgxpool.Pool, reg *events.Registry, c bus.Config, log *slog.Logger, metrics prometheus.Registerer) (*Runner, error) {
	r := &Runner{pool: pool, reg: reg, bus: c, log: log.With("component", "projections")}
	if metrics != nil {
		m := &runnerMetrics{
			applied: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "cfgd_projection_events_total", Help: "Events seen by a projection, by outcome.",
			}, []string{"projection", "outcome"}),
			failed: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "cfgd_projection_errors_total", Help: "Failed attempts to apply an event (each is retried).",
			}, []string{"projection"}),
			reg: metrics,
		}
		for _, c := range []prometheus.Collector{m.applied, m.failed} {
			if err := metrics.Register(c); err != nil {
				return nil, fmt.Errorf("projection metrics: %w", err)
			}
		}
		r.metrics = m
	}
	return r, nil
}

// GroupName is the Kafka consumer group of a projection.
func GroupName(projection string) string { return "cfgd.projection." + projection }

// Run consumes until ctx ends. Each projection gets its own consumer group
// and handler; a failing event is retried with backoff and never skipped, so
// a projection stalls rather than diverges.
func (r *Runner) Run(ctx context.Context, ps ...*Projection) error {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NewSlogLogger(r.log))
	if err != nil {
		return fmt.Errorf("projection router: %w", err)
	}
	router.AddMiddleware(middleware.Recoverer)
	topic := r.bus.Topic(bus.TopicEvents)
	r.applied = make(map[string]*atomic.Int64, len(ps))
	for _, p := range ps {
		r.applied[p.Name] = new(atomic.Int64)
	}
	flushDone := make(chan struct{})
	flushCtx, stopFlush := context.WithCancel(ctx)
	go func() {
		defer close(flushDone)
		r.flushPositions(flushCtx)
	}()
	defer func() {
		stopFlush()
		<-flushDone
	}()
	for _, p := range ps {
		if r.metrics != nil {
			if err := r.registerLag(p.Name); err != nil {
				return err
			}
		}
		sub, err := bus.NewSubscriber(r.bus, GroupName(p.Name), r.log)
		if err != nil {
			return err
		}
		h := router.AddConsumerHandler(p.Name, topic, sub, r.handle(p))
		h.AddMiddleware(middleware.Retry{
			MaxRetries:      8,
			InitialInterval: 50 * time.Millisecond,
			MaxInterval:     5 * time.Second,
			Multiplier:      2,
			Logger:          watermill.NewSlogLogger(r.log),
		}.Middleware)
	}
	if err := router.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("projection router: %w", err)
	}
	return nil
}

func (r *Runner) handle(p *Projection) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		// Skip unknown types on the header alone, without decoding.
		if t := msg.Metadata.Get(events.HeaderType); t != "" && !p.Handles(t) {
			r.count(p.Name, "ignored")
			return nil
		}
		env, err := events.Unmarshal(msg.Payload)
		if err != nil {
			// A body nobody can read would block the partition forever.
			r.log.Error("skipping undecodable message", "projection", p.Name, "message", msg.UUID, "err", err)
			r.count(p.Name, "undecodable")
			return nil
		}
		out, err := Apply(msg.Context(), r.pool, r.reg, p, env)
		var unknown *events.ErrUnknownType
		switch {
		case errors.As(err, &unknown):
			r.count(p.Name, "ignored")
			return nil
		case err != nil:
			if r.metrics != nil {
				r.metrics.failed.WithLabelValues(p.Name).Inc()
			}
			return err
		}
		r.count(p.Name, [...]string{"applied", "duplicate", "ignored"}[out])
		if out == Applied {
			storeMax(r.applied[p.Name], env.Position)
		}
		return nil
	}
}

// flushPositions writes the in-memory applied positions every second, and
// once more on the way out.
func (r *Runner) flushPositions(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	flushed := map[string]int64{}
	flush := func(ctx context.Context) {
		for name, pos := range r.applied {
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

func (r *Runner) count(projection, outcome string) {
	if r.metrics != nil {
		r.metrics.applied.WithLabelValues(projection, outcome).Inc()
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
	if err := r.metrics.reg.Register(g); err != nil {
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
