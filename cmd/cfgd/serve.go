package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/modules"
	"github.com/cfgd/cfgd/deploy/process"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/deploy/buildinfo"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/projections/pipeline"
)

// serve runs every module until ctx ends. HTTP comes up at once so
// /healthz and /readyz answer while dependencies are still being waited
// for; on the way down HTTP drains first, then the pipeline stops, then
// the embedded broker.
func serve(ctx context.Context, log *slog.Logger, app appSettings, stdout io.Writer) error {
	c := app.Core
	build := buildinfo.Read()
	log.Info("cfgd serve starting", build.LogAttrs()...)
	log.Info("memory limit", "bytes", memoryLimit(c.MemoryLimit, os.Getenv))
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), build.Collector())

	busCfg := kafka.Config{Brokers: c.KafkaBrokers, Partitions: c.KafkaPartitions, TopicPrefix: c.KafkaTopicPrefix,
		SASL:    kafka.SASL{Mechanism: c.KafkaSASLMechanism, User: c.KafkaSASLUser, Password: c.KafkaSASLPassword.Reveal()},
		Replica: replicaID(c), YieldBackoff: c.KafkaYieldBackoff}
	log.Info("kafka consumer groups", "replica", busCfg.Replica, "static_members", busCfg.Replica != "")
	if len(busCfg.Brokers) == 0 {
		emb, err := kafka.StartEmbedded(c.KafkaDataDir, c.KafkaEmbeddedAddr)
		if err != nil {
			return fmt.Errorf("embedded kafka (KAFKA__EMBEDDED_ADDR, KAFKA__DATA_DIR): %w", err)
		}
		// Closed last, after every producer and consumer has stopped.
		defer emb.Close()
		busCfg.Brokers, busCfg.SASL = []string{emb.Addr()}, emb.SASL()
		log.Info("embedded kafka started", "addr", emb.Addr(), "data_dir", c.KafkaDataDir)
	}

	d, err := openDeps(ctx, c, withClickHouseCluster(app.RequestLog.Sink.Cluster))
	if err != nil {
		return err
	}
	defer d.Close()

	reg, err := events.NewRegistry(eventTypes()...)
	if err != nil {
		return err
	}
	signer, generated, err := eventSigner(c, app.Signin.KeysDir)
	if err != nil {
		return err
	}
	chMigrated := make(chan struct{})
	w := wiring{log: log, app: app, deps: d, bus: busCfg, metrics: metrics, clickHouseMigrated: chMigrated, signer: signer}
	if generated != "" {
		w.generatedKeys = []string{generated}
	}
	mods, err := buildModules(ctx, w)
	if err != nil {
		return err
	}
	replayables, err := registry(d, reg, mods)
	if err != nil {
		return err
	}
	pipe, err := pipeline.New(pipeline.Config{Bus: busCfg, Wake: d.commits.C(), Metrics: metrics, Signer: signer}, d.pg, reg, log, replayables.Projections()...)
	if err != nil {
		return err
	}

	router, err := newRouter(log, metrics, d, busCfg, append(mods, modules.Module{
		Name: "relay", Checks: []process.Check{{Name: "relay", Ping: pipe.Ready}, {Name: "projections", Ping: pipe.ProjectionsReady}},
	}))
	if err != nil {
		return err
	}
	srv := rest.NewServer(c.HTTPAddr, router, c.ShutdownTimeout, log)
	servers := []process.Runner{{Name: "http", Run: srv.Run}}
	if c.MetricsAddr == "" {
		rest.MountMetrics(router, metrics, c.MetricsToken.Reveal())
	} else {
		mr := mux.NewRouter()
		rest.MountMetrics(mr, metrics, c.MetricsToken.Reveal())
		if c.MetricsPprof {
			rest.MountPprof(mr, c.MetricsToken.Reveal())
		}
		servers = append(servers, process.Runner{Name: "metrics", Run: rest.NewServer(c.MetricsAddr, mr, c.ShutdownTimeout, log).Run})
	}

	core := modules.Module{
		Name: "core",
		Background: []process.Runner{{Name: "pipeline", Run: func(ctx context.Context) error {
			if err := retry(ctx, log, "postgres", func(ctx context.Context) error { return schemas.UpPostgres(ctx, d.pg, log) }); err != nil {
				return nil
			}
			// On a cluster the DDL runs ON CLUSTER, which waits for every
			// server (up to 180 s on 18.16): only `cfgd migrate` runs it,
			// so serve starts and queues ingest in Kafka while a server is
			// down. The sink waits for the tables and says to migrate.
			if app.RequestLog.Sink.Cluster == "" {
				if err := retry(ctx, log, "clickhouse", func(ctx context.Context) error {
					return schemas.UpClickHouse(ctx, c.ClickHouseURL, log)
				}); err != nil {
					return nil
				}
			}
			close(chMigrated)
			return pipe.Run(ctx)
		}}},
		Servers: append(servers, process.Runner{Name: "banner", Run: func(ctx context.Context) error {
			select {
			case addr := <-srv.Started():
				metricsAddr := cmp.Or(c.MetricsAddr, addr)
				fmt.Fprintf(stdout, "cfgd is up\n  API      http://%s/\n  docs     http://%s/api/docs/\n  health   http://%s/readyz\n  metrics  http://%s%s\n  kafka    %v\n",
					addr, addr, addr, metricsAddr, rest.MetricsPath, busCfg.Brokers)
			case <-ctx.Done():
			}
			<-ctx.Done()
			return nil
		}}),
	}
	if err := modules.Run(ctx, log, append([]modules.Module{core}, mods...)...); err != nil {
		return err
	}
	log.Info("cfgd stopped")
	return nil
}

// newRouter is the root router with health, readiness and every module's
// routes (not /metrics, which may have a listener of its own).
func newRouter(log *slog.Logger, metrics *prometheus.Registry, d *deps, busCfg kafka.Config, mods []modules.Module) (*mux.Router, error) {
	router, err := rest.NewRouter(log, metrics)
	if err != nil {
		return nil, err
	}
	checks := append([]process.Check{
		{Name: "postgres", Ping: d.pg.Ping},
		{Name: "clickhouse", Ping: d.ch.Ping},
		{Name: "redis", Ping: func(ctx context.Context) error { return d.redis.Ping(ctx).Err() }},
		{Name: "kafka", Ping: func(ctx context.Context) error { return kafka.Ping(ctx, busCfg) }},
	}, modules.Checks(mods...)...)
	rest.MountHealth(router, 2*time.Second, checks...)
	// cfgd_ready{dependency}: what /readyz answers, for alerts.
	if err := metrics.Register(rest.NewReadyCollector(2*time.Second, checks...)); err != nil {
		return nil, fmt.Errorf("readiness metrics: %w", err)
	}
	if err := modules.Mount(router, mods...); err != nil {
		return nil, err
	}
	return router, nil
}

// memoryLimit sets the Go runtime's soft memory limit to limit bytes
// (SERVE__MEMORY_LIMIT_MB) unless it is 0 or GOMEMLIMIT set one, and
// returns the limit in force. Without one the collector lets the heap
// grow to twice what is live, which took a serve at its max ingest rate
// past 300 MB resident (docs/benchmarks.md, "Issue 31 point 4").
func memoryLimit(limit int64, getenv func(string) string) int64 {
	if limit > 0 && getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(limit)
	}
	return debug.SetMemoryLimit(-1)
}
