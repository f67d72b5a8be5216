package apikey

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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
	pool *pgxpool.Pool
	now  func() time.Time
}

// NewRevokeHandler returns the handler.
func NewRevokeHandler(pool *pgxpool.Pool, now func() time.Time) *RevokeHandler {
	return &RevokeHandler{pool: pool, now: now}
}

// Handle revokes the key and returns its state; revoking a revoked key
// changes nothing. It fails with ErrNotFound for an unknown id.
func (h *RevokeHandler) Handle(ctx context.Context, cmd Revoke) (*State, error) {
	return commands.Retry(ctx, 8, func(ctx context.Context) (*State, error) {
		s, err := Load(ctx, h.pool, cmd.ID)
		if err != nil {
			return nil, err
		}
		if s == nil {
			return nil, ErrNotFound
		}
		if s.Revoked {
			return s, nil
		}
		now := h.now()
		stream := apikey.Stream(s.ID)
		env, err := events.New(stream, apikey.Revoked{KeyID: s.ID, RevokedBy: cmd.RevokedBy, At: now.UTC()}, cmd.Meta, now)
		if err != nil {
			return nil, err
		}
		stored, err := store.Append(ctx, h.pool, stream, s.Version, env)
		if err != nil {
			return nil, err
		}
		at := now.UTC()
		s.Revoked, s.RevokedAt, s.Version = true, &at, stored[0].Version
		return s, nil
	})
}
