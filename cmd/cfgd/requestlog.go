package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/modules"
	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlog/ingestmetrics"
	"github.com/cfgd/cfgd/events/requestlogkafka"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/api/rest/monitor"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// requestLogProducer is the producer of the request-log topic, shared by
// the gRPC module (its own calls, cfgd.ingest.v1) and the request-log
// module (the HTTP ingest endpoint), which closes it.
func requestLogProducer(w wiring) (*requestlogkafka.Producer, error) {
	c := w.app.RequestLog.Producer
	c.Bus = w.bus
	signer := w.signer
	c.Signer = signer
	return requestlogkafka.NewProducer(c, w.log)
}

// IdempotencyWait is how long an ingest call waits for the answer of a
// concurrent call with the same Idempotency-Key (a produce takes at most
// its 1 s timeout) before it is answered 409 in progress.
const IdempotencyWait = 3 * time.Second

// requestLogModule is the request log: the ingest endpoint producing to
// the request-log topic through prod, the ClickHouse sink, and the staff
// monitoring endpoints over the read model. activeKeys counts active API
// keys (nil: active_api_keys is then 0).
func requestLogModule(w wiring, a *auth.API, prod *requestlogkafka.Producer, activeKeys requestlogview.ActiveAPIKeys) (modules.Module, error) {
	c := w.app.RequestLog
	c.Sink.Bus = w.bus
	// Records are signed with the events' key; the sink and the replay
	// dead-letter what does not verify.
	signer := w.signer
	c.Sink.Signer = signer
	c.Sink.Cutover = w.cutover(kafka.TopicRequestLogs)
	c.Sink.Dial = w.deps.dialClickHouse
	// The fence lets `cfgd replay requestlog.clickhouse` swap rebuilt
	// tables in between two of the sink's batches.
	s, err := sinks.NewFencedRequestLogs(c.Sink, w.deps.ch, sinks.PostgresFence{Pool: w.deps.pg}, w.log)
	if err != nil {
		return modules.Module{}, err
	}
	if err := s.SetMetrics(w.sinkMetrics); err != nil {
		return modules.Module{}, err
	}
	if w.metrics != nil {
		for _, c := range []prometheus.Collector{
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "cfgd_requestlog_rollup_refills_total",
				Help: "Request-log rollups refilled from the raw table after an insert that reached the raw table but not them.",
			}, func() float64 { return float64(s.Stats().Refilled) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "cfgd_requestlog_topic_recreated_total",
				Help: "Times the request-log sink found its topic deleted and created again (a new topic id).",
			}, func() float64 { return float64(s.Stats().TopicRecreated) }),
		} {
			if err := w.metrics.Register(c); err != nil {
				return modules.Module{}, fmt.Errorf("request-log sink metrics: %w", err)
			}
		}
	}
	// API-key usage (request_count, last_used_at) consumes the usage topic
	// (the requests cfgd authenticated by key); its settings are the
	// defaults until cmd/settings reads them.
	uc := sinks.DefaultUsageConfig(w.bus)
	uc.Signer = signer
	uc.Cutover = w.cutover(kafka.TopicAPIKeyUsage)
	usage, err := sinks.NewUsage(uc, w.deps.pg, w.log)
	if err != nil {
		return modules.Module{}, err
	}
	if w.metrics != nil {
		if err := w.metrics.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cfgd_apikey_usage_topic_recreated_total",
			Help: "Times the API-key usage consumer found its topic deleted and created again (a new topic id).",
		}, func() float64 { return float64(usage.Stats().TopicRecreated) })); err != nil {
			return modules.Module{}, fmt.Errorf("api-key usage metrics: %w", err)
		}
	}
	if err := usage.SetMetrics(w.sinkMetrics); err != nil {
		return modules.Module{}, err
	}
	// `cfgd replay requestlog.clickhouse` rebuilds the tables the sink
	// fills, with the sink's rows.
	rc := replay.DefaultClickHouseConfig(w.bus)
	rc.RetentionDays = c.Sink.RetentionDays
	rc.Cluster = c.Sink.Cluster
	rc.Dial = w.deps.dialClickHouse
	h := monitor.New(w.ingestMetrics.Counting(prod, ingestmetrics.REST), requestlogview.New(w.deps.ch, time.Now, activeKeys), time.Now).WithWindow(requestlog.WindowFor(c.Sink.RetentionDays)).
		WithIdempotency(requestlogview.NewIdempotency(w.deps.pg, time.Now, IdempotencyWait)).WithMetrics(w.ingestMetrics)
	return modules.Module{
		Name: "requestlog",
		Routes: func(r *mux.Router) error {
			h.Mount(r, a.Staff(), a.StaffOrAPIKey())
			// The page's assets are served by the front module.
			return pages.MountMonitorDashboard(r, a.Staff(), w.assets)
		},
		Replayables: []replay.Replayable{replay.ForClickHouse(rc, w.deps.ch, w.deps.pg, sinks.RequestLogCodec{Signer: signer, Cutover: c.Sink.Cutover}, c.Sink.Group)},
		Checks:      []process.Check{{Name: "requestlog-sink", Ping: s.Ready}, {Name: "apikey-usage", Ping: usage.Ready}},
		Background: []process.Runner{afterMigrations(w, s.Runner()), usage.Runner(), {Name: "requestlog-producer", Run: func(ctx context.Context) error {
			// Servers stop first, so nothing produces once this closes.
			<-ctx.Done()
			return prod.Close()
		}}},
	}, nil
}

// afterMigrations starts r once serve has applied the ClickHouse
// migrations: the sink creates any missing live table at start, and one it
// made before goose ran would already have the columns a later migration
// adds (18.16 cannot add a column only if missing), failing that migration.
func afterMigrations(w wiring, r process.Runner) process.Runner {
	if w.clickHouseMigrated == nil {
		return r
	}
	run := r.Run
	r.Run = func(ctx context.Context) error {
		select {
		case <-w.clickHouseMigrated:
		case <-ctx.Done():
			return nil
		}
		return run(ctx)
	}
	return r
}
