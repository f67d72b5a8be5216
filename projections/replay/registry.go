package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// Kinds of Replayable.
const (
	KindReadModel  = "read model"
	KindReactor    = "reactor"
	KindClickHouse = "clickhouse"
)

// Replayable is one entry of the Registry: something serve runs and
// replay rebuilds, or only lists (a reactor).
type Replayable struct {
	Name string
	Kind string
	// Logs are what it is built from: "event store", topics.
	Logs   []string
	Tables []string
	// Unit is what its Progress counts: "events" or "records".
	Unit string
	// Projection is the Postgres projection serve runs from the events
	// topic; nil for the ClickHouse tables (their sink is a runner of its
	// own).
	Projection *projections.Projection
	// Target returns a fresh target that rebuilds it, cfg tuning a
	// Postgres one; nil for a reactor, which replay never runs.
	Target func(cfg Config) (Target, error)
	// Status reports how far its live builder has read its log.
	Status  func(ctx context.Context) (Status, error)
	summary func(Result) string
}

// Status is how far a live projection or sink has read its log.
type Status struct {
	// Streams are the streams it keeps a checkpoint of; -1 where it keeps
	// Kafka offsets instead (the ClickHouse tables).
	Streams int64
	// Position is the highest store position applied, or the sum over
	// partitions of the offsets committed; Lag is the log's head minus it.
	// Both are -1 when the log did not answer.
	Position, Lag int64
}

// Summary is the line that says what a swapped-in replay of e did.
func (e Replayable) Summary(res Result) string {
	return e.summary(res)
}

// ForProjection is the entry of p, a projection of pool's event store
// whose events reg decodes.
func ForProjection(pool *pgxpool.Pool, reg *events.Registry, p *projections.Projection) Replayable {
	e := Replayable{Name: p.Name, Kind: KindReadModel, Logs: []string{"event store"}, Tables: p.Tables, Unit: "events", Projection: p,
		Status: func(ctx context.Context) (Status, error) { return postgresStatus(ctx, pool, p) },
		summary: func(res Result) string {
			feeds := ""
			if len(p.Feeds) > 0 {
				feeds = fmt.Sprintf(" and %d records of its feeds", res.Records)
			}
			return fmt.Sprintf("%s: replayed %d events (%d applied)%s in %s, swapped in", p.Name, res.Events, res.Applied, feeds, res.Elapsed.Round(time.Millisecond))
		},
	}
	for _, f := range p.Feeds {
		e.Logs = append(e.Logs, f.Topic())
	}
	if p.Reactor {
		e.Kind = KindReactor
		return e
	}
	e.Target = func(cfg Config) (Target, error) { return NewPostgres(pool, reg, p, cfg) }
	return e
}

// ForClickHouse is the entry of the request-log tables, rebuilt by
// NewClickHouse(cfg, conn, pool, codec); its status is that of the live
// sink's consumer group.
func ForClickHouse(cfg ClickHouseConfig, conn driver.Conn, pool *pgxpool.Pool, codec Codec, group string) Replayable {
	return Replayable{Name: RequestLogName, Kind: KindClickHouse, Logs: []string{cfg.Bus.Topic(kafka.TopicRequestLogs)},
		Tables: requestlogview.LiveTables().All(), Unit: "records",
		Target: func(run Config) (Target, error) {
			cfg := cfg
			cfg.AllowPartial = run.AllowPartial
			return NewClickHouse(cfg, conn, pool, codec)
		},
		Status: func(ctx context.Context) (Status, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			st, err := clickhouseStatus(ctx, cfg.Bus, group)
			if err != nil {
				// A listing says what it cannot tell rather than fail.
				return Status{Streams: -1, Position: -1, Lag: -1}, nil
			}
			return st, nil
		},
		summary: func(res Result) string {
			lost := ""
			if res.Lost > 0 {
				lost = fmt.Sprintf(", %d rows whose records Kafka no longer held left out (--allow-partial)", res.Lost)
			}
			resumed := ""
			if res.Resumed {
				resumed = "finished the swap an interrupted replay began, then "
			}
			return fmt.Sprintf("%s: %sreplayed %d records (%d events, %d unreadable skipped%s) in %s, swapped in",
				RequestLogName, resumed, res.Records, res.Events, res.Poisoned, lost, res.Elapsed.Round(time.Millisecond))
		},
	}
}

// Registry is every projection serve runs and replay rebuilds or lists,
// in the order given.
type Registry struct {
	entries []Replayable
}

// NewRegistry lists ps (Postgres projections of pool's event store, whose
// events reg decodes), then others.
func NewRegistry(pool *pgxpool.Pool, reg *events.Registry, ps []*projections.Projection, others ...Replayable) (*Registry, error) {
	r := &Registry{}
	for _, p := range ps {
		r.entries = append(r.entries, ForProjection(pool, reg, p))
	}
	r.entries = append(r.entries, others...)
	seen := map[string]bool{}
	var errs []error
	for _, e := range r.entries {
		if seen[e.Name] {
			errs = append(errs, fmt.Errorf("replay registry: %s twice", e.Name))
		}
		seen[e.Name] = true
	}
	return r, errors.Join(errs...)
}

// All lists every entry.
func (r *Registry) All() []Replayable { return r.entries }

// Projections are the Postgres projections, for serve's pipeline.
func (r *Registry) Projections() []*projections.Projection {
	var out []*projections.Projection
	for _, e := range r.entries {
		if e.Projection != nil {
			out = append(out, e.Projection)
		}
	}
	return out
}

// Lookup finds the entry called name.
func (r *Registry) Lookup(name string) (Replayable, bool) {
	for _, e := range r.entries {
		if e.Name == name {
			return e, true
		}
	}
	return Replayable{}, false
}
