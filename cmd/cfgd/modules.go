package main

import (
	"context"
	"log/slog"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/events"
	eventsapikey "github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/bus"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/projections"
)

// wiring is what each feature module is built from.
type wiring struct {
	log     *slog.Logger
	app     appSettings
	deps    *deps
	bus     bus.Config
	events  *events.Registry
	metrics prometheus.Registerer
	router  *mux.Router
}

// eventTypes is the explicit registry of every event type cfgd stores.
func eventTypes() []events.Event {
	var all []events.Event
	all = append(all, identity.Events()...)
	all = append(all, eventsapikey.Events()...)
	return all
}

// buildModules mounts every feature's endpoints on w.router and returns the
// projections and reactors to feed from Kafka, and the runners to start
// with HTTP.
func buildModules(ctx context.Context, w wiring) ([]*projections.Projection, []runner, error) {
	var ps []*projections.Projection
	idps, staff, a, err := buildIdentity(w)
	if err != nil {
		return nil, nil, err
	}
	ps = append(ps, idps...)
	grpcps, grpcRun, err := buildGRPC(w, a)
	if err != nil {
		return nil, nil, err
	}
	ps = append(ps, grpcps...)
	if err := mountExtensions(ctx, w, staff, map[string]mux.MiddlewareFunc{"staff": staff}); err != nil {
		return nil, nil, err
	}
	return ps, []runner{grpcRun}, nil
}
