// Package events defines what the write side appends and the read side
// consumes: the Envelope around every event, the explicit Registry of event
// types, and the codec between the two. Stores, the relay and the Kafka bus
// live in sub-packages.
package events

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Envelope is one stored event.
type Envelope struct {
	ID       uuid.UUID `json:"id"`
	Stream   string    `json:"stream"`
	Version  int64     `json:"version"`  // 1-based position inside Stream
	Position int64     `json:"position"` // global, assigned by the store; 0 until appended
	Type     string    `json:"type"`
	// SchemaVersion is the version of Data's shape (events.Versioned); 0
	// in events stored before payloads had versions, which are version 1.
	SchemaVersion int             `json:"schema_version,omitempty"`
	OccurredAt    time.Time       `json:"occurred_at"`
	Metadata      Metadata        `json:"metadata"`
	Data          json.RawMessage `json:"data"`
}

// Metadata travels with every event.
type Metadata struct {
	CorrelationID string `json:"correlation_id,omitempty"`
	CausationID   string `json:"causation_id,omitempty"`
	Actor         string `json:"actor,omitempty"`
	// SchemaVersion is the version of the payload's shape (Versioned),
	// set by New; 0 in events stored before payloads had versions, which
	// are version 1. Kept in the metadata so the event store's columns and
	// every reader of them stay as they are.
	SchemaVersion int `json:"schema_version,omitempty"`
}

// Event is implemented by every event payload; the name is the stable type
// string stored in the log, never the Go type name, so Go types can be
// renamed without breaking replay.
type Event interface {
	EventType() string
}

// Stream versions passed as expectedVersion to Append.
const (
	// NoStream expects the stream not to exist yet.
	NoStream int64 = 0
	// AnyVersion appends without a concurrency check.
	AnyVersion int64 = -1
)
