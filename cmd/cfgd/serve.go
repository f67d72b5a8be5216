package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/cfgd/cfgd/api"
	"github.com/cfgd/cfgd/api/health"
	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/deploy/migrations"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/bus"
	"github.com/cfgd/cfgd/events/relay"
	"github.com/cfgd/cfgd/projections"
)

// serve runs HTTP, the relay and the projections until ctx ends. HTTP comes
// up first so /healthz and /readyz answer while dependencies are still
// being waited for.
func serve(ctx context.Context, log *slog.Logger, app appSettings, stdout io.Writer) error {
	c := app.Core
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	busCfg := bus.Config{Brokers: c.KafkaBrokers, Partitions: c.KafkaPartitions, TopicPrefix: c.KafkaTopicPrefix}
	if len(busCfg.Brokers) == 0 {
		emb, err := bus.StartEmbedded(c.KafkaDataDir, c.KafkaEmbeddedAddr)
		if err != nil {
			return fmt.Errorf("embedded kafka (KAFKA__EMBEDDED_ADDR, KAFKA__DATA_DIR): %w", err)
		}
		// Closed last, after every producer and consumer has stopped.
		defer emb.Close()
		busCfg.Brokers = []string{emb.Addr()}
		log.Info("embedded kafka started", "addr", emb.Addr(), "data_dir", c.KafkaDataDir)
	}

	d, err := openDeps(ctx, c)
	if err != nil {
		return err
	}
	defer d.Close()

	reg, err := events.NewRegistry(eventTypes()...)
	if err != nil {
		return err
	}

	router, err := api.NewRouter(log, metrics)
	if err != nil {
		return err
	}
	health.Mount(router, 2*time.Second,
		health.Check{Name: "postgres", Ping: d.pg.Ping},
		health.Check{Name: "clickhouse", Ping: d.ch.Ping},
		health.Check{Name: "redis", Ping: func(ctx context.Context) error { return d.redis.Ping(ctx).Err() }},
		health.Check{Name: "kafka", Ping: func(ctx context.Context) error { return bus.Ping(ctx, busCfg) }},
	)
	w := wiring{log: log, app: app, deps: d, bus: busCfg, events: reg, metrics: metrics, router: router}
	ps, err := buildModules(ctx, w)
	if err != nil {
		return err
	}

	srv := api.NewServer(c.HTTPAddr, router, c.ShutdownTimeout, log)
	g, gctx := errgroup.WithContext(ctx)
	// The relay and projections outlive the HTTP drain, so a request still
	// in flight (say, one waiting for its own write to be projected) can
	// finish; they stop once HTTP has.
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(gctx))
	defer stopBackground()
	g.Go(func() error {
		defer stopBackground()
		return srv.Run(gctx)
	})
	g.Go(func() error {
		select {
		case addr := <-srv.Started():
			fmt.Fprintf(stdout, "cfgd is up\n  API      http://%s/\n  health   http://%s/readyz\n  metrics  http://%s/metrics\n  kafka    %v\n",
				addr, addr, addr, busCfg.Brokers)
		case <-gctx.Done():
		}
		return nil
	})
	g.Go(func() error {
		err := runBackground(bgCtx, log, d, busCfg, reg, metrics, c, ps)
		if err != nil && bgCtx.Err() == nil {
			return err // stops HTTP too, through gctx
		}
		return nil
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("cfgd stopped")
	return err
}

// runBackground waits for the stores, migrates, then runs the relay and
// the projections. Each wait is logged by dependency name.
func runBackground(ctx context.Context, log *slog.Logger, d *deps, busCfg bus.Config, reg *events.Registry,
	metrics prometheus.Registerer, c settings.Core, ps []*projections.Projection) error {
	if err := retry(ctx, log, "postgres", func(ctx context.Context) error { return migrations.Up(ctx, d.pg, log) }); err != nil {
		return nil
	}
	if err := retry(ctx, log, "clickhouse", func(ctx context.Context) error { return migrations.UpClickHouse(ctx, c.ClickHouseURL) }); err != nil {
		return nil
	}
	if err := retry(ctx, log, "kafka", func(ctx context.Context) error { return bus.EnsureTopics(ctx, busCfg, log, bus.TopicEvents) }); err != nil {
		return nil
	}
	pub, err := bus.NewPublisher(busCfg)
	if err != nil {
		return err
	}
	// Close flushes and waits for the producer's in-flight requests.
	defer func() {
		if err := pub.Close(); err != nil {
			log.Warn("kafka publisher close", "err", err)
		}
	}()
	signer, err := processSigner()
	if err != nil {
		return err
	}
	rl, err := relay.New(relay.Config{Topic: busCfg.Topic(bus.TopicEvents), Metrics: metrics, Wake: d.commits.C()}, d.pg, signingPublisher{pub: pub, signer: signer}, log)
	if err != nil {
		return err
	}
	runner, err := projections.NewRunner(projections.Config{Bus: busCfg, Registry: reg, Signer: signer, Metrics: metrics}, d.pg, log)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return rl.Run(gctx) })
	if len(ps) > 0 {
		g.Go(func() error { return runner.Run(gctx, projections.Each(ps...)...) })
	}
	return g.Wait()
}
