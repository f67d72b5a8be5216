// Package apikey holds the events of API keys, which administrators create
// and revoke for callers of cfgd's gRPC services. A key is 256 random bits
// behind a recognisable prefix; the log and the read model keep only its
// SHA-256 hash and its masked form, never the key itself. A fast hash is the
// right one here: a key has 256 bits of entropy, so there is nothing to
// guess, and every gRPC call must check one.
//
// Streams:
//
//	apikey-<id>  one key: created, then perhaps revoked
package apikey

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"time"

	"github.com/cfgd/cfgd/events"
)

// Created opens an apikey-<id> stream.
type Created struct {
	KeyID     int64      `json:"key_id"`
	Name      string     `json:"name"`
	KeyType   string     `json:"key_type"`
	KeyHash   string     `json:"key_hash"`   // hex SHA-256 of the full key
	MaskedKey string     `json:"masked_key"` // first four + "..." + last four
	UserID    int64      `json:"user_id"`
	UserEmail string     `json:"user_email"` // the owner's address when the key was made
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"` // nil: never
}

func (Created) EventType() string { return "apikey.created" }

// Revoked ends a key for good.
type Revoked struct {
	KeyID     int64     `json:"key_id"`
	RevokedBy string    `json:"revoked_by"`
	At        time.Time `json:"at"`
}

func (Revoked) EventType() string { return "apikey.revoked" }

// Events returns one prototype of every API key event, for the registry.
func Events() []events.Event { return []events.Event{Created{}, Revoked{}} }

// Stream is the stream of key id.
func Stream(id int64) string { return "apikey-" + strconv.FormatInt(id, 10) }

// Key types (docs/api.md#api-keys).
const (
	TypeService     = "service"
	TypeCLI         = "cli"
	TypeWebhook     = "webhook"
	TypeInternal    = "internal"
	TypeDevelopment = "development"
)

// Types lists every key type, in the order the stats report them.
func Types() []string {
	return []string{TypeService, TypeCLI, TypeWebhook, TypeInternal, TypeDevelopment}
}

// ValidType tells whether t is a key type.
func ValidType(t string) bool { return slices.Contains(Types(), t) }

// Prefix starts every key, so a leaked one is recognisable (secret
// scanners, logs) and a caller can tell it from a JWT.
const Prefix = "cfgd_"

// Hash is the stored form of a full key.
func Hash(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:])
}

// Mask is the only form of a key ever shown after its creation.
func Mask(raw string) string {
	if len(raw) < 12 {
		return "..."
	}
	return raw[:4] + "..." + raw[len(raw)-4:]
}
