package signin

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
	"github.com/cfgd/cfgd/readmodels/identityview"
)

// How a principal proved who it is.
const (
	ViaBearer  = "bearer"
	ViaBasic   = "basic"
	ViaSession = "session"
	ViaAPIKey  = "api_key"
)

// Principal is who made a call, whatever the transport.
type Principal struct {
	UserID      int64
	SessionID   string // empty for Basic and API keys
	UserVersion int64  // the user version the credential promises readers
	Via         string
	KeyID       int64  // API keys only
	KeyName     string // API keys only
	// User is set once the principal's user has been loaded (RequireStaff,
	// Password); nil after a bare token check.
	User *identityview.User
}

// Credential failures. Transports map them to 401/403 (HTTP) or
// Unauthenticated/PermissionDenied (gRPC); any other error is a failing
// dependency.
var (
	ErrNoCredentials = errors.New("authentication credentials were not provided")
	ErrInvalidToken  = errcode.New(errcode.TokenNotValid, "Token is invalid or expired")
	ErrBadPassword   = errors.New("invalid e-mail or password")
	ErrInvalidAPIKey = errors.New("API key is invalid, revoked or expired")
	ErrNotStaff      = errors.New("you do not have permission to perform this action")
)

// APIKeys checks a raw API key (readmodels/apikey.Authenticator).
type APIKeys interface {
	Authenticate(ctx context.Context, raw string) (apikeyview.Owner, error)
	// Ready fails until the keys read model is current as of the start.
	Ready(ctx context.Context) error
}

// Authenticator turns credentials into a Principal without knowing the
// transport: the HTTP middleware of api/auth and the gRPC interceptors are
// thin adapters over it, so both accept and refuse the same credentials.
type Authenticator struct {
	app   *App
	pool  *pgxpool.Pool
	keys  APIKeys
	usage Usage
}

// Ready fails until the read models every credential check trusts (the
// revocation set and the API keys) hold every event stored before this
// process started, and the revocation set is loaded: a replica restarted
// after a logout or a key's creation answers neither from a stale view.
// The checks themselves wait for the same (at most ReadWait).
func (a *Authenticator) Ready(ctx context.Context) error {
	return errors.Join(a.app.Revocations.Ready(ctx), a.keys.Ready(ctx))
}

// Bearer checks an access token and its session's revocation.
func (a *Authenticator) Bearer(ctx context.Context, raw string) (*Principal, error) {
	return a.token(ctx, raw, token.Access, ViaBearer)
}

// Session checks the admin session cookie's token and its revocation.
func (a *Authenticator) Session(ctx context.Context, raw string) (*Principal, error) {
	return a.token(ctx, raw, token.Web, ViaSession)
}

func (a *Authenticator) token(ctx context.Context, raw string, kind token.Kind, via string) (*Principal, error) {
	if raw == "" {
		return nil, ErrNoCredentials
	}
	claims, err := a.app.Tokens.Parse(raw, kind)
	if err != nil {
		return nil, ErrInvalidToken
	}
	revoked, err := a.app.Revocations.Revoked(ctx, claims.SessionID)
	if err != nil {
		return nil, err
	}
	if revoked {
		return nil, ErrInvalidToken
	}
	return &Principal{UserID: claims.UserID(), SessionID: claims.SessionID, UserVersion: claims.UserVersion, Via: via}, nil
}

// APIKey checks a raw API key. Each key it accepts is one request of
// that key for its usage (request_count, last_used_at), at server time:
// both transports call it once per request (an HTTP request, a gRPC call
// or stream), and it is the only place a key's use is a fact rather than
// a caller's claim.
func (a *Authenticator) APIKey(ctx context.Context, raw string) (*Principal, error) {
	p, err := a.CheckAPIKey(ctx, raw)
	if err != nil {
		return nil, err
	}
	if a.usage != nil {
		a.usage.Record(p.KeyID, a.app.Now())
	}
	return p, nil
}

// CheckAPIKey checks a raw API key as APIKey does, without counting a
// use: the check again of a call already counted (an open gRPC stream's
// credentials, rechecked every few seconds, are one use).
func (a *Authenticator) CheckAPIKey(ctx context.Context, raw string) (*Principal, error) {
	if raw == "" {
		return nil, ErrNoCredentials
	}
	o, err := a.keys.Authenticate(ctx, raw)
	if errors.Is(err, apikeyview.ErrInvalidKey) {
		return nil, ErrInvalidAPIKey
	}
	if err != nil {
		return nil, err
	}
	return &Principal{UserID: o.UserID, Via: ViaAPIKey, KeyID: o.KeyID, KeyName: o.KeyName}, nil
}

// Password checks an e-mail and password (HTTP Basic) under the failed
// password limits of the address and of clientIP. Only wrong passwords
// count; a *ThrottledError says the limit is reached.
func (a *Authenticator) Password(ctx context.Context, email, password, clientIP string) (*Principal, error) {
	if email == "" || password == "" || len(password) > MaxPasswordBytes {
		return nil, ErrBadPassword
	}
	var u *user.State
	err := a.GuardPassword(ctx, email, clientIP, func() (bool, error) {
		var err error
		u, err = user.Authenticate(ctx, a.pool, email, password)
		if errors.Is(err, user.ErrBadCredentials) {
			return true, ErrBadPassword
		}
		return false, err
	})
	if err != nil {
		return nil, err
	}
	return &Principal{UserID: u.ID, UserVersion: u.Version, Via: ViaBasic, User: &identityview.User{
		ID: u.ID, Email: u.Email, FirstName: u.FirstName, LastName: u.LastName, IsActive: u.IsActive,
		IsStaff: u.IsStaff, IsSuperuser: u.IsSuperuser, DateJoined: u.JoinedAt, Version: u.Version,
	}}, nil
}

// MaxPasswordBytes bounds the password hashed, so a huge one costs nothing.
const MaxPasswordBytes = 1024

// GuardPassword runs check, which reports whether a password was wrong,
// under the failed-password limits of email and clientIP (the login
// command uses it as HTTP Basic does).
func (a *Authenticator) GuardPassword(ctx context.Context, email, clientIP string, check func() (failed bool, err error)) error {
	keys := []GuardKey{{Key: "login:ip:" + clientIP, Limit: a.app.Config.LoginIPFailures}}
	if norm, err := identity.NormaliseEmail(email); err == nil {
		keys = append(keys, GuardKey{Key: "login:email:" + norm, Limit: a.app.Config.LoginFailures})
	}
	return a.app.Limiter.Guard(ctx, a.app.Config.LoginWindow, keys, check)
}

// RequireStaff loads p's user if needed and checks it is an active staff
// member.
func (a *Authenticator) RequireStaff(ctx context.Context, p *Principal) error {
	if err := a.LoadUser(ctx, p); err != nil {
		return err
	}
	if !p.User.IsActive || !p.User.IsStaff {
		return ErrNotStaff
	}
	return nil
}

// LoadUser sets p.User from the users read model, as of at least the
// version p's credential promises. It waits for the projection only when
// the user is known to exist at that version (the event store says so):
// a token for a user that does not exist, or not yet at that version, is
// refused at once instead of waiting out ReadWait.
func (a *Authenticator) LoadUser(ctx context.Context, p *Principal) error {
	if p.User != nil {
		return nil
	}
	u, err := a.app.Users.ByID(ctx, p.UserID, 0)
	if err == nil && u.Version >= p.UserVersion {
		p.User = &u
		return nil
	}
	if err != nil && !errors.Is(err, identityview.ErrNotFound) {
		return err
	}
	stored, err := store.Version(ctx, a.pool, identity.UserStream(p.UserID))
	if err != nil {
		return fmt.Errorf("user %d: %w", p.UserID, err)
	}
	want := max(p.UserVersion, 1)
	if stored < want {
		return ErrInvalidToken
	}
	u, err = a.app.Users.ByID(ctx, p.UserID, want)
	if err != nil {
		return err
	}
	p.User = &u
	return nil
}
