// Package projections builds read models from the event stream. A
// Projection is a named set of typed handlers; the Runner feeds groups of
// them from Kafka through a sarama consumer group and applies a whole batch
// of events in one Postgres transaction together with each projection's
// per-stream checkpoints, so a re-delivered event changes nothing and an
// event that arrives before its predecessor waits for it. Reactors (side
// effects such as sending an e-mail) use the same machinery: their
// checkpoint makes sure a redelivery does not repeat the effect, and replay
// never touches them.
package projections

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events"
)

// Tx is what a handler writes the read model with, inside the batch's
// transaction. Exec is pipelined: its statements are queued and sent to
// Postgres together, in order, before the next Query or QueryRow and at the
// end of the batch, so a batch of events costs a few round trips rather than
// one per statement. A queued statement's failure is reported as the
// failure of the event whose handler queued it. Use QueryRow or Query for a
// statement whose result the handler needs.
type Tx interface {
	Exec(ctx context.Context, sql string, args ...any) error
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Handler applies one event inside tx.
type Handler func(ctx context.Context, tx Tx, env events.Envelope, ev events.Event) error

// Projection is a named read model (or reactor). The name is its checkpoint
// key: renaming it starts it again from the beginning.
type Projection struct {
	Name string
	// Tables are the tables this projection alone writes; replay truncates
	// them before rebuilding.
	Tables []string
	// Reactor marks a projection with side effects outside its tables
	// (e-mail, HTTP calls): replay never runs it.
	Reactor bool
	// Feeds are the tables' other sources, which only replay runs (see
	// Feed); a projection carries them when it is built for replay.
	Feeds    []Feed
	handlers map[string]Handler
}

// New returns an empty read-model projection that owns tables.
func New(name string, tables ...string) *Projection {
	return &Projection{Name: name, Tables: tables, handlers: map[string]Handler{}}
}

// NewReactor returns an empty reactor; tables, if any, hold its own
// bookkeeping.
func NewReactor(name string, tables ...string) *Projection {
	p := New(name, tables...)
	p.Reactor = true
	return p
}

// On registers a typed handler for events of type T (a value type that
// implements events.Event; the registry decodes to *T).
func On[T events.Event](p *Projection, fn func(ctx context.Context, tx Tx, env events.Envelope, ev *T) error) {
	var zero T
	p.handlers[zero.EventType()] = func(ctx context.Context, tx Tx, env events.Envelope, ev events.Event) error {
		typed, ok := any(ev).(*T)
		if !ok {
			return fmt.Errorf("projection %s: %s decoded as %T", p.Name, env.Type, ev)
		}
		return fn(ctx, tx, env, typed)
	}
}

// Handles tells whether p has a handler for an event type.
func (p *Projection) Handles(typ string) bool {
	_, ok := p.handlers[typ]
	return ok
}

// Types lists the event types p handles.
func (p *Projection) Types() []string {
	out := make([]string, 0, len(p.handlers))
	for t := range p.handlers {
		out = append(out, t)
	}
	return out
}

// Validate joins every problem of p.
func (p *Projection) Validate() error {
	var errs []error
	if p.Name == "" {
		errs = append(errs, errors.New("projection: empty name"))
	}
	if !p.Reactor && len(p.Tables) == 0 {
		errs = append(errs, fmt.Errorf("projection %s: a read model must declare the tables it owns", p.Name))
	}
	if len(p.handlers) == 0 {
		errs = append(errs, fmt.Errorf("projection %s: no handlers", p.Name))
	}
	return errors.Join(errs...)
}

// Group is a set of projections fed by one Kafka consumer group: each batch
// of events is applied to all of them in one transaction. The consumer
// group's committed offsets are shared, so the set is fixed for a name: a
// projection added to an existing group would start at the group's offset,
// not at the beginning of the log; give the new set a new name (which reads
// the log from its oldest record, the checkpoints skipping what is done).
type Group struct {
	Name        string
	Projections []*Projection
}

// ConsumerGroup is the Kafka consumer group id of g.
func (g Group) ConsumerGroup() string { return "cfgd.projection." + g.Name }

// Validate joins every problem of g.
func (g Group) Validate() error {
	var errs []error
	if g.Name == "" {
		errs = append(errs, errors.New("projection group: empty name"))
	}
	if len(g.Projections) == 0 {
		errs = append(errs, fmt.Errorf("projection group %s: no projections", g.Name))
	}
	seen := map[string]bool{}
	for _, p := range g.Projections {
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", g.Name, err))
		}
		if seen[p.Name] {
			errs = append(errs, fmt.Errorf("projection group %s: %s twice", g.Name, p.Name))
		}
		seen[p.Name] = true
	}
	return errors.Join(errs...)
}

// Each puts every projection in a group of its own, named after it.
func Each(ps ...*Projection) []Group {
	out := make([]Group, len(ps))
	for i, p := range ps {
		out[i] = Group{Name: p.Name, Projections: []*Projection{p}}
	}
	return out
}
