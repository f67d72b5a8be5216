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
	types map[string]kind
}

// kind is a registered type: its Go type, current version and upcasters.
type kind struct {
	t       reflect.Type
	version int
	up      []Upcaster // up[i]: version i+1 to i+2
}

// NewRegistry registers the given prototypes (pointers or values of event
// structs). A duplicate type string is a programming error reported at once.
func NewRegistry(prototypes ...Event) (*Registry, error) {
	r := &Registry{types: make(map[string]kind, len(prototypes))}
	for _, p := range prototypes {
		if err := r.Register(p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds one prototype. A type at version N > 1 must bring N-1
// upcasters (Upcasting), so every stored version still decodes.
func (r *Registry) Register(prototype Event) error {
	t := reflect.TypeOf(prototype)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	name := prototype.EventType()
	if prev, ok := r.types[name]; ok && prev.t != t {
		return fmt.Errorf("event type %q registered twice (%s and %s)", name, prev.t, t)
	}
	k := kind{t: t, version: VersionOf(prototype)}
	if u, ok := prototype.(Upcasting); ok {
		k.up = u.Upcasters()
	}
	if len(k.up) != k.version-1 {
		return fmt.Errorf("event type %q is at version %d and has %d upcasters: it needs one per older version", name, k.version, len(k.up))
	}
	r.types[name] = k
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

// Check says whether this build understands a record of type typ at
// shape version version, written by a build of schema level level (the
// record's headers; envelopes carry the version in their body too): nil
// when it does, *ErrNewerSchema when only a newer build does (a newer
// version, or a type this build never heard of from a higher level), and
// *ErrUnknownType for a type no build up to this level knows.
func (r *Registry) Check(typ string, version, level int) error {
	k, ok := r.types[typ]
	switch {
	case ok && version > k.version:
		return &ErrNewerSchema{Type: typ, Version: version}
	case ok:
		return nil
	case level > SchemaLevel:
		return &ErrNewerSchema{Type: typ, Version: max(version, 1)}
	default:
		return &ErrUnknownType{Type: typ}
	}
}

// Upcast returns env with its payload in the current shape of its type
// (Metadata.SchemaVersion the current version). A version newer than this build's
// is *ErrNewerSchema; an unknown type *ErrUnknownType.
func (r *Registry) Upcast(env Envelope) (Envelope, error) {
	k, ok := r.types[env.Type]
	if !ok {
		return env, &ErrUnknownType{Type: env.Type}
	}
	v := max(env.Metadata.SchemaVersion, 1)
	if v > k.version {
		return env, &ErrNewerSchema{Type: env.Type, Version: v}
	}
	for ; v < k.version; v++ {
		data, err := k.up[v-1](env.Data)
		if err != nil {
			return env, fmt.Errorf("upcast %s %s v%d: %w", env.Type, env.ID, v, err)
		}
		env.Data = data
	}
	env.Metadata.SchemaVersion = k.version
	return env, nil
}

// Decode returns the payload of env, upcast to its type's current shape,
// as a pointer to its registered Go type.
func (r *Registry) Decode(env Envelope) (Event, error) {
	env, err := r.Upcast(env)
	if err != nil {
		return nil, err
	}
	t := r.types[env.Type].t
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
	md.SchemaVersion = VersionOf(e)
	return Envelope{
		ID:         uuid.New(),
		Stream:     stream,
		Type:       e.EventType(),
		OccurredAt: now.UTC(),
		Metadata:   md,
		Data:       data,
	}, nil
}
