package main

import (
	"context"
	"log/slog"

	"github.com/cfgd/cfgd/api/module"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/bus"
	"github.com/cfgd/cfgd/events/identity"
)

// wiring is what each module is built from.
type wiring struct {
	log  *slog.Logger
	app  appSettings
	deps *deps
	bus  bus.Config
}

// eventTypes is the explicit registry of every event type cfgd stores.
func eventTypes() []events.Event {
	var all []events.Event
	all = append(all, identity.Events()...)
	return all
}

// buildModules builds every capability. A new capability is one more
// constructor here and nothing else.
func buildModules(ctx context.Context, w wiring) ([]module.Module, error) {
	id, a, err := identityModule(w)
	if err != nil {
		return nil, err
	}
	ext, err := extensionsModule(ctx, w, a)
	if err != nil {
		return nil, err
	}
	rl, err := requestLogModule(w, a, nil)
	if err != nil {
		return nil, err
	}
	return []module.Module{id, ext, rl}, nil
}
