package events

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Message header names used on the bus. Keeping them in headers as well as in
// the body lets consumers route and skip without decoding the payload.
const (
	HeaderType          = "event_type"
	HeaderStream        = "stream"
	HeaderVersion       = "stream_version"
	HeaderPosition      = "position"
	HeaderOccurredAt    = "occurred_at"
	HeaderCorrelationID = "correlation_id"
)

// Headers returns the bus headers for env.
func Headers(env Envelope) map[string]string {
	h := map[string]string{
		HeaderType:       env.Type,
		HeaderStream:     env.Stream,
		HeaderVersion:    strconv.FormatInt(env.Version, 10),
		HeaderPosition:   strconv.FormatInt(env.Position, 10),
		HeaderOccurredAt: env.OccurredAt.UTC().Format(time.RFC3339Nano),
	}
	if env.Metadata.CorrelationID != "" {
		h[HeaderCorrelationID] = env.Metadata.CorrelationID
	}
	for k, v := range SchemaHeaders(env.Metadata.SchemaVersion) {
		h[k] = v
	}
	return h
}

// Marshal encodes a whole envelope as a message body.
func Marshal(env Envelope) ([]byte, error) {
	b, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode envelope %s: %w", env.ID, err)
	}
	return b, nil
}

// Unmarshal decodes a message body produced by Marshal.
func Unmarshal(b []byte) (Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return Envelope{}, fmt.Errorf("decode envelope: %w", err)
	}
	if env.ID == uuid.Nil || env.Stream == "" || env.Type == "" || env.Version < 1 {
		return Envelope{}, fmt.Errorf("decode envelope: missing id, stream, type or version")
	}
	return env, nil
}
