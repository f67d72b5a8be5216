package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cfgd/cfgd/api"
	"github.com/cfgd/cfgd/api/health"
	"github.com/cfgd/cfgd/api/module"
	"github.com/cfgd/cfgd/deploy/migrations"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/bus"
	"github.com/cfgd/cfgd/projections/pipeline"
)

// serve runs every module until ctx ends. HTTP comes up at once so
// /healthz and /readyz answer while dependencies are still being waited
// for; on the way down HTTP drains first, then the pipeline stops, then
// the embedded broker.
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
	modules, err := buildModules(ctx, wiring{log: log, app: app, deps: d, bus: busCfg})
	if err != nil {
		return err
	}
	pipe, err := pipeline.New(pipeline.Config{Bus: busCfg, Wake: d.commits.C(), Metrics: metrics}, d.pg, reg, log, module.Projections(modules...)...)
	if err != nil {
		return err
	}

	router, err := api.NewRouter(log, metrics)
	if err != nil {
		return err
	}
	health.Mount(router, 2*time.Second, append([]health.Check{
		{Name: "postgres", Ping: d.pg.Ping},
		{Name: "clickhouse", Ping: d.ch.Ping},
		{Name: "redis", Ping: func(ctx context.Context) error { return d.redis.Ping(ctx).Err() }},
		{Name: "kafka", Ping: func(ctx context.Context) error { return bus.Ping(ctx, busCfg) }},
	}, module.Checks(modules...)...)...)
	if err := module.Mount(router, modules...); err != nil {
		return err
	}
	srv := api.NewServer(c.HTTPAddr, router, c.ShutdownTimeout, log)

	core := module.Module{
		Name: "core",
		Background: []module.Runner{{Name: "pipeline", Run: func(ctx context.Context) error {
			if err := retry(ctx, log, "postgres", func(ctx context.Context) error { return migrations.Up(ctx, d.pg, log) }); err != nil {
				return nil
			}
			if err := retry(ctx, log, "clickhouse", func(ctx context.Context) error { return migrations.UpClickHouse(ctx, c.ClickHouseURL) }); err != nil {
				return nil
			}
			return pipe.Run(ctx)
		}}},
		Servers: []module.Runner{
			{Name: "http", Run: srv.Run},
			{Name: "banner", Run: func(ctx context.Context) error {
				select {
				case addr := <-srv.Started():
					fmt.Fprintf(stdout, "cfgd is up\n  API      http://%s/\n  docs     http://%s/api/docs/\n  health   http://%s/readyz\n  metrics  http://%s/metrics\n  kafka    %v\n",
						addr, addr, addr, addr, busCfg.Brokers)
				case <-ctx.Done():
				}
				<-ctx.Done()
				return nil
			}},
		},
	}
	if err := module.Run(ctx, log, append([]module.Module{core}, modules...)...); err != nil {
		return err
	}
	log.Info("cfgd stopped")
	return nil
}
