package events

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"
)

// Registry maps type strings to Go types. It is built once in cmd/cfgd and
// passed to whoever encodes or decodes.
type Registry struct {
	types map[string]reflect.Type
}

// NewRegistry registers the given prototypes (pointers or values of event
// structs). A duplicate type string is a programming error reported at once.
func NewRegistry(prototypes ...Event) (*Registry, error) {
	r := &Registry{types: make(map[string]reflect.Type, len(prototypes))}
	for _, p := range prototypes {
		if err := r.Register(p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds one prototype.
func (r *Registry) Register(prototype Event) error {
	t := reflect.TypeOf(prototype)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	name := prototype.EventType()
	if prev, ok := r.types[name]; ok && prev != t {
		return fmt.Errorf("event type %q registered twice (%s and %s)", name, prev, t)
	}
	r.types[name] = t
	return nil
}

// Known tells whether a type string is registered.
func (r *Registry) Known(typ string) bool {
	_, ok := r.types[typ]
	return ok
}

// ErrUnknownType is returned by Decode for a type the registry lacks;
// read-model consumers skip such events.
type ErrUnknownType struct{ Type string }

func (e *ErrUnknownType) Error() string { return fmt.Sprintf("unknown event type %q", e.Type) }

// Decode returns the payload of env as a pointer to its registered Go type.
func (r *Registry) Decode(env Envelope) (Event, error) {
	t, ok := r.types[env.Type]
	if !ok {
		return nil, &ErrUnknownType{Type: env.Type}
	}
	v := reflect.New(t)
	if err := json.Unmarshal(env.Data, v.Interface()); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", env.Type, env.ID, err)
	}
	ev, ok := v.Interface().(Event)
	if !ok {
		return nil, fmt.Errorf("decode %s: %s does not implement Event", env.Type, t)
	}
	return ev, nil
}

// New wraps a payload in an Envelope ready for Append; the store fills in
// Version and Position.
func New(stream string, e Event, md Metadata, now time.Time) (Envelope, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return Envelope{}, fmt.Errorf("encode %s: %w", e.EventType(), err)
	}
	return Envelope{
		ID:         uuid.New(),
		Stream:     stream,
		Type:       e.EventType(),
		OccurredAt: now.UTC(),
		Metadata:   md,
		Data:       data,
	}, nil
}
