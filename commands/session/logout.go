package session

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
)

// Logout revokes a session.
type Logout struct {
	SessionID string
	UserID    int64
	Meta      events.Metadata
}

// ErrNoSession is returned for a session that does not exist or belongs to
// someone else.
var ErrNoSession = errors.New("no such session")

// LogoutHandler handles Logout.
type LogoutHandler struct {
	pool *pgxpool.Pool
	now  func() time.Time
}

// NewLogoutHandler returns the handler.
func NewLogoutHandler(pool *pgxpool.Pool, now func() time.Time) *LogoutHandler {
	return &LogoutHandler{pool: pool, now: now}
}

// Handle revokes the session; revoking a revoked session changes nothing.
// It returns when the session would have expired, which is how long the
// revocation must be remembered.
func (h *LogoutHandler) Handle(ctx context.Context, cmd Logout) (time.Time, error) {
	return commands.Retry(ctx, 8, func(ctx context.Context) (time.Time, error) {
		s, err := Load(ctx, h.pool, cmd.SessionID)
		if err != nil {
			return time.Time{}, err
		}
		if s == nil || s.UserID != cmd.UserID {
			return time.Time{}, ErrNoSession
		}
		if s.Revoked {
			return s.ExpiresAt, nil
		}
		return s.ExpiresAt, revoke(ctx, h.pool, s, identity.RevokedLogout, cmd.Meta, h.now())
	})
}
