package apikeys

import (
	"context"
	"time"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/store"
)

// Revoke ends key ID.
type Revoke struct {
	ID        int64
	RevokedBy string
	Meta      events.Metadata
}

// RevokeHandler handles Revoke.
type RevokeHandler struct {
	pool store.DB
	now  func() time.Time
}

// NewRevokeHandler returns the handler.
func NewRevokeHandler(pool store.DB, now func() time.Time) *RevokeHandler {
	return &RevokeHandler{pool: pool, now: now}
}

// Handle revokes the key and returns its state; revoking a revoked key
// changes nothing. It fails with ErrNotFound for an unknown id.
func (h *RevokeHandler) Handle(ctx context.Context, cmd Revoke) (*State, error) {
	return commands.Execute(ctx, h.pool, "revoke API key",
		func(ctx context.Context) (*State, error) { return Load(ctx, h.pool, cmd.ID) },
		func(_ context.Context, s *State) (commands.Decision[*State], error) {
			if s == nil {
				return commands.Decision[*State]{}, ErrNotFound
			}
			if s.Revoked {
				return commands.Decision[*State]{Result: s}, nil
			}
			now := h.now()
			stream := apikey.Stream(s.ID)
			env, err := events.New(stream, apikey.Revoked{KeyID: s.ID, RevokedBy: cmd.RevokedBy, At: now.UTC()}, cmd.Meta, now)
			if err != nil {
				return commands.Decision[*State]{}, err
			}
			at := now.UTC()
			next := *s
			next.Revoked, next.RevokedAt, next.Version = true, &at, s.Version+1
			return commands.Decision[*State]{
				Writes: []store.Write{{Stream: stream, Expected: s.Version, Events: []events.Envelope{env}}},
				Result: &next,
			}, nil
		})
}
