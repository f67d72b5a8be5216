package session

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// Refresh exchanges a refresh token for a new access token (and, with
// rotation, a new refresh token).
type Refresh struct {
	Token string
	Meta  events.Metadata
}

// RefreshResult holds the new access token; Refresh is nil unless rotated.
type RefreshResult struct {
	Access  token.Issued
	Refresh *token.Issued
}

// ErrReused reports a rotated refresh token presented again; the session
// has been revoked. It wraps ErrInvalidToken.
var ErrReused = fmt.Errorf("%w: refresh token reused, session revoked", ErrInvalidToken)

// RefreshHandler handles Refresh.
type RefreshHandler struct {
	pool   store.DB
	tokens Tokens
	rotate bool
	now    func() time.Time
}

// NewRefreshHandler returns the handler; rotate hands out a new refresh
// token on each use and treats a second use of the old one as theft.
func NewRefreshHandler(pool store.DB, tokens Tokens, rotate bool, now func() time.Time) *RefreshHandler {
	return &RefreshHandler{pool: pool, tokens: tokens, rotate: rotate, now: now}
}

// Handle checks the token against the session's stream, so a logout or a
// reuse takes effect at once.
func (h *RefreshHandler) Handle(ctx context.Context, cmd Refresh) (RefreshResult, error) {
	claims, err := h.tokens.Parse(cmd.Token, token.Refresh)
	if err != nil {
		return RefreshResult{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	type none = commands.Decision[RefreshResult]
	return commands.Execute(ctx, h.pool, "refresh",
		func(ctx context.Context) (*State, error) { return Load(ctx, h.pool, claims.SessionID) },
		func(_ context.Context, s *State) (commands.Decision[RefreshResult], error) {
			now := h.now()
			switch {
			case s == nil, s.Kind != identity.SessionAPI, s.UserID != claims.UserID():
				return none{}, fmt.Errorf("%w: unknown session", ErrInvalidToken)
			case s.Revoked:
				return none{}, fmt.Errorf("%w: session revoked", ErrInvalidToken)
			case !now.Before(s.ExpiresAt):
				return none{}, fmt.Errorf("%w: session expired", ErrInvalidToken)
			case s.Rotated[claims.ID]:
				// Someone holds a token that was already exchanged: either
				// the client or a thief is replaying it. End the session
				// for both, and say so only once that is recorded.
				w, err := revoke(s, identity.RevokedReuse, cmd.Meta, now)
				if err != nil {
					return none{}, err
				}
				return none{Writes: []store.Write{w}, Err: ErrReused}, nil
			case claims.ID != s.RefreshID:
				return none{}, fmt.Errorf("%w: not the session's refresh token", ErrInvalidToken)
			}
			var d none
			if h.rotate {
				next := uuid.NewString()
				exp := now.Add(h.tokens.TTL(token.Refresh))
				stream := identity.SessionStream(s.ID)
				env, err := events.New(stream, identity.SessionRefreshed{
					SessionID: s.ID, PreviousID: claims.ID, RefreshID: next, At: now.UTC(), ExpiresAt: exp.UTC(),
				}, cmd.Meta, now)
				if err != nil {
					return none{}, err
				}
				d.Writes = []store.Write{{Stream: stream, Expected: s.Version, Events: []events.Envelope{env}}}
				r, err := h.tokens.Issue(token.Spec{Kind: token.Refresh, UserID: s.UserID, SessionID: s.ID, ID: next, UserVersion: s.UserVersion, IssuedAt: now, ExpiresAt: exp})
				if err != nil {
					return none{}, err
				}
				d.Result.Refresh = &r
			}
			access, err := h.tokens.Issue(token.Spec{Kind: token.Access, UserID: s.UserID, SessionID: s.ID, UserVersion: s.UserVersion, IssuedAt: now})
			if err != nil {
				return none{}, err
			}
			d.Result.Access = access
			return d, nil
		})
}
