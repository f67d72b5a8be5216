package modules

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/replay"
)

// Module is one capability, assembled.
type Module struct {
	Name string
	// Routes mounts the module's HTTP endpoints; nil for none. An error
	// (say, two modules claiming one path) stops start-up.
	Routes func(r *mux.Router) error
	// Projections are fed from the events topic by the shared runner;
	// replay rebuilds them (each with its feeds) or lists them (reactors).
	Projections []*projections.Projection
	// Replayables are the other tables replay rebuilds (the request log's
	// ClickHouse tables, filled live by a sink among Background).
	Replayables []replay.Replayable
	// Checks join /readyz.
	Checks []process.Check
	// Background runners start before the servers and stop after them.
	Background []process.Runner
	// Servers accept requests; they start last and are drained first.
	Servers []process.Runner
}

// Mount adds every module's routes to r.
func Mount(r *mux.Router, ms ...Module) error {
	for _, m := range ms {
		if m.Routes == nil {
			continue
		}
		if err := m.Routes(r); err != nil {
			return fmt.Errorf("module %s: %w", m.Name, err)
		}
	}
	return nil
}

// Projections lists every module's projections.
func Projections(ms ...Module) []*projections.Projection {
	var out []*projections.Projection
	for _, m := range ms {
		out = append(out, m.Projections...)
	}
	return out
}

// Replayables lists every module's Replayables.
func Replayables(ms ...Module) []replay.Replayable {
	var out []replay.Replayable
	for _, m := range ms {
		out = append(out, m.Replayables...)
	}
	return out
}

// Checks lists every module's readiness checks.
func Checks(ms ...Module) []process.Check {
	var out []process.Check
	for _, m := range ms {
		out = append(out, m.Checks...)
	}
	return out
}

// Run runs every module's runners as one ordered group: background
// runners first, then servers. When ctx ends, or any runner fails, the
// servers are stopped first and waited for (so a request in flight can
// still read its own write through the background pipeline), then the
// background runners. It returns the first failure, or nil after a clean
// stop.
func Run(ctx context.Context, log *slog.Logger, ms ...Module) error {
	var background, servers []process.Runner
	for _, m := range ms {
		background = append(background, m.Background...)
		servers = append(servers, m.Servers...)
	}
	return process.RunStages(ctx, log, background, servers)
}
