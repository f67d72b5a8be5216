package session

import (
	"context"
	"errors"
	"time"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
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
	pool store.DB
	now  func() time.Time
}

// NewLogoutHandler returns the handler.
func NewLogoutHandler(pool store.DB, now func() time.Time) *LogoutHandler {
	return &LogoutHandler{pool: pool, now: now}
}

// Handle revokes the session; revoking a revoked session changes nothing.
// It returns when the session would have expired, which is how long the
// revocation must be remembered.
func (h *LogoutHandler) Handle(ctx context.Context, cmd Logout) (time.Time, error) {
	return commands.Execute(ctx, h.pool, "logout",
		func(ctx context.Context) (*State, error) { return Load(ctx, h.pool, cmd.SessionID) },
		func(_ context.Context, s *State) (commands.Decision[time.Time], error) {
			if s == nil || s.UserID != cmd.UserID {
				return commands.Decision[time.Time]{}, ErrNoSession
			}
			if s.Revoked {
				return commands.Decision[time.Time]{Result: s.ExpiresAt}, nil
			}
			w, err := revoke(s, identity.RevokedLogout, cmd.Meta, h.now())
			if err != nil {
				return commands.Decision[time.Time]{}, err
			}
			return commands.Decision[time.Time]{Writes: []store.Write{w}, Result: s.ExpiresAt}, nil
		})
}
