// Package pipeline is cfgd's write-to-read path in one piece: the outbox
// relay from the Postgres event store to the events topic, and the
// projection runner from that topic into the read models. cfgd serve and
// the tests build it with New, so both run exactly the same path.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/projections"
)

// Config of the pipeline.
type Config struct {
	Bus kafka.Config
	// Relay tunes the relay; its Topic, Metrics and Wake are set by New.
	Relay outbox.Config
	// Wake ticks after this process committed appends
	// (store.CommitSignal); nil makes the relay poll.
	Wake <-chan struct{}
	// Metrics registers the relay and projection metrics; nil for none.
	Metrics prometheus.Registerer
	// Signer signs every event the relay publishes (and, with the same
	// key, projections verify them).
	Signer *events.Signer
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	return c.Bus.Validate()
}

// Pipeline is the relay and the projection runner, built and not yet
// running.
type Pipeline struct {
	cfg    Config
	pool   *pgxpool.Pool
	log    *slog.Logger
	relay  *outbox.Relay
	runner *projections.Runner
	ps     []*projections.Projection
	pub    *kafka.Publisher
}

// New builds the pipeline feeding ps. Nothing connects until Run.
func New(cfg Config, pool *pgxpool.Pool, reg *events.Registry, log *slog.Logger, ps ...*projections.Projection) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	pub, err := kafka.NewPublisher(cfg.Bus)
	if err != nil {
		return nil, err
	}
	rc := cfg.Relay
	rc.Topic, rc.Metrics, rc.Wake, rc.Signer = cfg.Bus.Topic(kafka.TopicEvents), cfg.Metrics, cfg.Wake, cfg.Signer
	rc.OpenTail = func() (outbox.Tail, error) { return kafka.NewReader(cfg.Bus) }
	rl, err := outbox.New(rc, pool, pub, log)
	if err != nil {
		_ = pub.Close()
		return nil, err
	}
	runner, err := projections.NewRunner(projections.Config{Bus: cfg.Bus, Registry: reg, Signer: cfg.Signer, Metrics: cfg.Metrics}, pool, log)
	if err != nil {
		_ = pub.Close()
		return nil, err
	}
	if err := runner.InitMetrics(projections.Each(ps...)...); err != nil {
		_ = pub.Close()
		return nil, err
	}
	return &Pipeline{cfg: cfg, pool: pool, log: log, relay: rl, runner: runner, ps: ps, pub: pub}, nil
}

// Ready fails while the relay cannot publish for a reason only an operator
// can fix (a checkpoint ahead of the cluster, after a restore); /readyz
// reports it.
func (p *Pipeline) Ready(ctx context.Context) error { return p.relay.Ready(ctx) }

// ProjectionsReady fails while a projection group waits for a newer cfgd
// (Runner.Ready); /readyz reports it.
func (p *Pipeline) ProjectionsReady(ctx context.Context) error { return p.runner.Ready(ctx) }

// Run creates the events topic, then relays and projects until ctx ends.
// The producer is flushed and closed on the way out.
func (p *Pipeline) Run(ctx context.Context) error {
	defer func() {
		if err := p.pub.Close(); err != nil {
			p.log.Warn("kafka publisher close", "err", err)
		}
	}()
	// Kafka may still be starting: wait for it rather than fail the process.
	for bo := process.Backoff(250*time.Millisecond, 10*time.Second); ; {
		err := kafka.EnsureTopics(ctx, p.cfg.Bus, p.log, kafka.TopicEvents)
		if err == nil {
			break
		}
		p.log.WarnContext(ctx, "dependency unavailable, retrying", "dependency", "kafka", "err", err)
		if !process.Wait(ctx, bo) {
			return nil
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.relay.Run(gctx) })
	if len(p.ps) > 0 {
		g.Go(func() error { return p.runner.Run(gctx, projections.Each(p.ps...)...) })
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
