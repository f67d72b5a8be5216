package commands

import (
	"encoding/json"
	"fmt"

	"github.com/cfgd/cfgd/events"
)

// Fold turns a stream's events into a state S, dispatching each event to
// the handler registered for its type; the payload is decoded to the
// handler's event type first. Event types without a handler are skipped,
// so a stream may carry events a fold does not care about. A Fold is built
// once with NewFold and never changes.
type Fold[S any] struct {
	handlers map[string]func(*S, events.Envelope) error
}

// Handler applies one event type to S; When makes one.
type Handler[S any] struct {
	typ   string
	apply func(*S, events.Envelope) error
}

// When returns the handler of events of type E: fn gets the state and the
// decoded payload.
func When[E events.Event, S any](fn func(s *S, e E)) Handler[S] {
	var zero E
	return Handler[S]{typ: zero.EventType(), apply: func(s *S, env events.Envelope) error {
		var e E
		if err := json.Unmarshal(env.Data, &e); err != nil {
			return fmt.Errorf("decode %s %s v%d: %w", env.Type, env.Stream, env.Version, err)
		}
		fn(s, e)
		return nil
	}}
}

// NewFold builds a fold from its handlers. Two handlers for one event type
// are a programming error, caught when the fold is built.
func NewFold[S any](handlers ...Handler[S]) Fold[S] {
	f := Fold[S]{handlers: make(map[string]func(*S, events.Envelope) error, len(handlers))}
	for _, h := range handlers {
		if _, dup := f.handlers[h.typ]; dup {
			panic(fmt.Sprintf("commands.NewFold: two handlers for %s", h.typ))
		}
		f.handlers[h.typ] = h.apply
	}
	return f
}

// Apply folds envs, in order, into s and returns the version of the last
// one (0 for none): the version to append at.
func (f Fold[S]) Apply(s *S, envs []events.Envelope) (int64, error) {
	var version int64
	for _, env := range envs {
		version = env.Version
		if h, ok := f.handlers[env.Type]; ok {
			if err := h(s, env); err != nil {
				return 0, err
			}
		}
	}
	return version, nil
}

// Handles tells whether f has a handler for an event type.
func (f Fold[S]) Handles(typ string) bool {
	_, ok := f.handlers[typ]
	return ok
}
