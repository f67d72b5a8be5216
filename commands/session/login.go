package session

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// Login opens an admin cookie session with an e-mail and password.
type Login struct {
	Email    string
	Password string
	Meta     events.Metadata
}

// LoginResult is the new session and its cookie token.
type LoginResult struct {
	User      *user.State
	SessionID string
	Token     token.Issued
}

// Login failures. ErrBadCredentials is the same whatever was wrong, so the
// answer does not tell whether the address has an account.
var (
	ErrBadCredentials = user.ErrBadCredentials
	ErrNotStaff       = errors.New("this account may not use the administration")
)

// LoginHandler handles Login.
type LoginHandler struct {
	pool   store.DB
	tokens Tokens
	now    func() time.Time
}

// NewLoginHandler returns the handler.
func NewLoginHandler(pool store.DB, tokens Tokens, now func() time.Time) *LoginHandler {
	return &LoginHandler{pool: pool, tokens: tokens, now: now}
}

// Handle checks the password (user.Authenticate) and starts a web session.
func (h *LoginHandler) Handle(ctx context.Context, cmd Login) (LoginResult, error) {
	u, err := user.Authenticate(ctx, h.pool, cmd.Email, cmd.Password)
	if err != nil {
		return LoginResult{}, err
	}
	if !u.IsStaff {
		return LoginResult{}, ErrNotStaff
	}
	sid := uuid.NewString()
	type none = commands.Decision[LoginResult]
	return commands.Execute(ctx, h.pool, "login",
		func(ctx context.Context) (*user.State, error) { return user.Load(ctx, h.pool, u.ID) },
		func(_ context.Context, cur *user.State) (commands.Decision[LoginResult], error) {
			// The password was checked against u; the user may have
			// changed since.
			if cur == nil || cur.PasswordHash != u.PasswordHash || !cur.IsStaff || !cur.IsActive {
				return none{}, ErrBadCredentials
			}
			now := h.now()
			exp := now.Add(h.tokens.TTL(token.Web))
			us := identity.UserStream(cur.ID)
			login, err := events.New(us, identity.LoggedIn{UserID: cur.ID, SessionID: sid, At: now.UTC(), Method: "password"}, cmd.Meta, now)
			if err != nil {
				return none{}, err
			}
			userVersion := cur.Version + 1
			ss := identity.SessionStream(sid)
			start, err := events.New(ss, identity.SessionStarted{
				SessionID: sid, UserID: cur.ID, Kind: identity.SessionWeb, UserVersion: userVersion,
				StartedAt: now.UTC(), ExpiresAt: exp.UTC(),
			}, cmd.Meta, now)
			if err != nil {
				return none{}, err
			}
			// Signing is pure: the token is handed out only once the
			// writes committed.
			t, err := h.tokens.Issue(token.Spec{Kind: token.Web, UserID: cur.ID, SessionID: sid, UserVersion: userVersion, IssuedAt: now, ExpiresAt: exp})
			if err != nil {
				return none{}, err
			}
			cur.LastLogin, cur.Version = now.UTC(), userVersion
			return commands.Decision[LoginResult]{
				Writes: []store.Write{
					{Stream: us, Expected: userVersion - 1, Events: []events.Envelope{login}},
					{Stream: ss, Expected: events.NoStream, Events: []events.Envelope{start}},
				},
				Result: LoginResult{User: cur, SessionID: sid, Token: t},
			}, nil
		})
}
