package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/modules"
	"github.com/cfgd/cfgd/projections/replay"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/readmodels/apikeyview"

	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/catalog"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog/ingestmetrics"
	"github.com/cfgd/cfgd/projections/sinks"
)

// wiring is what each module is built from.
type wiring struct {
	log  *slog.Logger
	app  appSettings
	deps *deps
	bus  kafka.Config
	// metrics is where modules register their collectors (nil in tests
	// that do not look).
	metrics prometheus.Registerer
	// sinkMetrics and ingestMetrics are registered in metrics once, for
	// every module (nil without metrics).
	sinkMetrics   *sinks.Metrics
	ingestMetrics *ingestmetrics.Metrics
	// assets are the pages' static assets, indexed once; the front
	// module serves them.
	assets *pages.Assets
	// clickHouseMigrated is closed once serve has applied the ClickHouse
	// migrations (nil: nothing to wait for).
	clickHouseMigrated <-chan struct{}
	// generatedKeys are key files this start created before the modules
	// (the event signing key); the identity module reports them with its
	// own in one log line.
	generatedKeys []string
	// signer signs and verifies what cfgd puts on the bus (events, request
	// logs, usage and lifecycle records): made once, in serve.
	signer *events.Signer
}

// eventTypes is the explicit registry of every event type cfgd stores.
func eventTypes() []events.Event { return catalog.Events() }

// buildModules builds every capability. A new capability is one more
// constructor here and nothing else.
func buildModules(ctx context.Context, w wiring) ([]modules.Module, error) {
	assets, err := pages.NewAssets()
	if err != nil {
		return nil, err
	}
	w.assets = assets
	if w.signer == nil {
		// replay and the CLI build the modules too: they sign and verify
		// with the key serve uses.
		signer, generated, err := eventSigner(w.app.Core, w.app.Signin.KeysDir)
		if err != nil {
			return nil, err
		}
		w.signer = signer
		if generated != "" {
			w.generatedKeys = append(w.generatedKeys, generated)
		}
	}
	if w.metrics != nil {
		if w.sinkMetrics, err = sinks.NewMetrics(w.metrics); err != nil {
			return nil, err
		}
		if w.ingestMetrics, err = ingestmetrics.New(w.metrics); err != nil {
			return nil, err
		}
	}
	id, a, err := identityModule(w)
	if err != nil {
		return nil, err
	}
	ext, err := extensionsModule(ctx, w, a)
	if err != nil {
		return nil, err
	}
	keys := apikeyview.NewKeys(w.deps.pg, time.Now)
	activeKeys := func(ctx context.Context) (int64, error) {
		st, err := keys.Stats(ctx)
		return st.ActiveKeys, err
	}
	// One request-log producer for both ways in: the gRPC server's own
	// calls and the ingest endpoints.
	prod, err := requestLogProducer(w)
	if err != nil {
		return nil, err
	}
	grpc, err := grpcModule(w, a, prod, activeKeys)
	if err != nil {
		return nil, err
	}
	front := frontModule(w)
	tq, err := tasksModule(ctx, w, a)
	if err != nil {
		return nil, err
	}
	rl, err := requestLogModule(w, a, prod, activeKeys)
	if err != nil {
		return nil, err
	}
	return []modules.Module{id, ext, grpc, tq, rl, front}, nil
}

// registry is the one list of what serve runs and replay rebuilds: every
// module's projections (read from the events topic, with their feeds) and
// other replayable tables.
func registry(d *deps, reg *events.Registry, mods []modules.Module) (*replay.Registry, error) {
	return replay.NewRegistry(d.pg, reg, modules.Projections(mods...), modules.Replayables(mods...)...)
}
