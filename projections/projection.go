// Package projections builds read models from the event stream. A
// Projection is a named set of typed handlers; the Runner feeds it from Kafka
// through a Watermill consumer group of the same name, and applies each event
// in one Postgres transaction together with the projection's checkpoint, so
// a re-delivered event changes nothing. Reactors (side effects such as
// sending an e-mail) use the same machinery: their checkpoint makes sure a
// redelivery does not repeat the effect, and replay never touches them.
package projections

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events"
)

// Handler applies one event inside tx.
type Handler func(ctx context.Context, tx pgx.Tx, env events.Envelope, ev events.Event) error

// Projection is a named read model (or reactor). The name is its consumer
// group and checkpoint key: renaming it starts it again from the beginning.
type Projection struct {
	Name     string
	handlers map[string]Handler
}

// New returns an empty projection.
func New(name string) *Projection {
	return &Projection{Name: name, handlers: map[string]Handler{}}
}

// On registers a typed handler for events of type T (a value type that
// implements events.Event; the registry decodes to *T).
func On[T events.Event](p *Projection, fn func(ctx context.Context, tx pgx.Tx, env events.Envelope, ev *T) error) {
	var zero T
	p.handlers[zero.EventType()] = func(ctx context.Context, tx pgx.Tx, env events.Envelope, ev events.Event) error {
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
