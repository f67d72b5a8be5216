// Package auth serves passwordless sign-in over HTTP: OTP request and
// verify, token refresh, logout, the admin password login, the JWKS, and
// the middleware other packages protect their endpoints with (RequireUser
// for a Bearer access token, Staff for admin endpoints).
//
// Every endpoint decodes and checks its input, runs one command from
// commands/otp or commands/session (writes) or a query of
// readmodels/identity (reads), and maps each outcome to a status and the
// error body of api/web.
package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/api/web"
	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/commands/mail"
	"github.com/cfgd/cfgd/commands/otp"
	"github.com/cfgd/cfgd/commands/session"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
	rm "github.com/cfgd/cfgd/readmodels/identity"
)

// Paths served by Mount.
const (
	PathOTPRequest = "/api/auth/otp/request/"
	PathOTPVerify  = "/api/auth/otp/verify/"
	PathRefresh    = "/api/auth/token/refresh/"
	PathLogout     = "/api/auth/logout/"
	PathLogin      = "/api/auth/login/"
	PathJWKS       = "/.well-known/jwks.json"
)

// Cookie names of an admin session. csrftoken is readable by scripts, which
// echo it in X-CSRFToken; the session cookie is not.
const (
	SessionCookie = "cfgd_session"
	CSRFCookie    = "csrftoken"
	CSRFHeader    = "X-CSRFToken"
)

// Deps is what Build needs besides settings.
type Deps struct {
	Pool  *pgxpool.Pool
	Redis redis.Cmdable
	Log   *slog.Logger
	// Mail overrides the sender chosen by the settings (tests).
	Mail mail.Sender
	// Console is where EMAIL__BACKEND=console prints; default stdout.
	Console io.Writer
	// Now is the clock of every command and token check; default time.Now.
	Now func() time.Time
	// FailureFloor is the least time an invalid_otp answer takes, so a
	// wrong, used, expired and unknown code cannot be told apart by timing;
	// default DefaultFailureFloor.
	FailureFloor time.Duration
	// ReadWait bounds how long a read waits for the projection to reach a
	// token's user version; default 5s.
	ReadWait time.Duration
}

// DefaultFailureFloor comfortably exceeds the slowest failure path (a load
// plus an append) on a loaded host.
const DefaultFailureFloor = 40 * time.Millisecond

// API is the sign-in feature assembled.
type API struct {
	s           Settings
	log         *slog.Logger
	now         func() time.Time
	floor       time.Duration
	tokens      *token.Service
	csrfKey     []byte
	limiter     *Limiter
	users       *rm.Users
	revocations *rm.Revocations

	request otpRequester
	verify  otpVerifier
	refresh tokenRefresher
	logout  sessionEnder
	login   passwordLogin
}

// The commands, as the handlers use them.
type (
	otpRequester interface {
		Handle(ctx context.Context, cmd otp.Request) (otp.RequestResult, error)
	}
	otpVerifier interface {
		Handle(ctx context.Context, cmd otp.Verify) (otp.VerifyResult, error)
	}
	tokenRefresher interface {
		Handle(ctx context.Context, cmd session.Refresh) (session.RefreshResult, error)
	}
	sessionEnder interface {
		Handle(ctx context.Context, cmd session.Logout) (time.Time, error)
	}
	passwordLogin interface {
		Handle(ctx context.Context, cmd session.Login) (session.LoginResult, error)
	}
)

// Build loads (or creates) the keys, and assembles the commands, read
// models and handlers of sign-in.
func Build(s Settings, d Deps) (*API, error) {
	if d.Pool == nil || d.Redis == nil {
		return nil, errors.New("auth: a Postgres pool and a Redis client are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.FailureFloor == 0 {
		d.FailureFloor = DefaultFailureFloor
	}
	if d.ReadWait == 0 {
		d.ReadWait = 5 * time.Second
	}
	keys, err := token.Load(s.JWT.Algorithm, s.JWT.SigningKey.Reveal(), s.KeysDir)
	if err != nil {
		return nil, fmt.Errorf("auth: signing key (JWT__SIGNING_KEY or %s): %w", s.KeysDir, err)
	}
	tokens, err := token.New(token.Config{
		Issuer: s.JWT.Issuer, Audience: s.JWT.Audience,
		AccessTTL: s.JWT.AccessTTL, RefreshTTL: s.JWT.RefreshTTL, WebTTL: s.SessionTTL, Now: d.Now,
	}, keys)
	if err != nil {
		return nil, err
	}
	secret := []byte(s.OTPHMACKey.Reveal())
	if len(secret) == 0 {
		if secret, err = token.LoadOrCreateSecret(filepath.Join(s.KeysDir, "otp-hmac.key")); err != nil {
			return nil, fmt.Errorf("auth: OTP HMAC key (OTP__HMAC_KEY or %s): %w", s.KeysDir, err)
		}
	}
	hasher, err := otp.NewHasher(secret)
	if err != nil {
		return nil, err
	}
	templates, err := otp.ParseTemplates()
	if err != nil {
		return nil, err
	}
	sender := d.Mail
	if sender == nil {
		sender = newSender(s.Email, d.Console)
	}
	sources := user.Sources{DashboardHosts: s.DashboardHosts, RegistrationPaths: s.RegistrationPaths}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("cfgd csrf v1"))
	return &API{
		s: s, log: d.Log, now: d.Now, floor: d.FailureFloor, tokens: tokens, csrfKey: m.Sum(nil),
		limiter:     NewLimiter(d.Redis, s.RedisPrefix),
		users:       rm.NewUsers(d.Pool, d.ReadWait),
		revocations: rm.NewRevocations(d.Pool, s.JWT.RevocationPoll, s.JWT.AccessTTL, d.Now),
		request:     otp.NewRequestHandler(d.Pool, hasher, templates, sender, d.Now, d.Log),
		verify:      otp.NewVerifyHandler(d.Pool, hasher, tokens, sources, d.Now),
		refresh:     session.NewRefreshHandler(d.Pool, tokens, s.JWT.RotateRefresh, d.Now),
		logout:      session.NewLogoutHandler(d.Pool, d.Now),
		login:       session.NewLoginHandler(d.Pool, tokens, d.Now),
	}, nil
}

func newSender(e EmailSettings, console io.Writer) mail.Sender {
	if e.Backend == "smtp" {
		return &mail.SMTP{
			Host: e.SMTPHost, Port: e.SMTPPort, From: e.From, Username: e.SMTPUsername, Password: e.SMTPPassword.Reveal(),
			Security: e.SMTPSecurity, Timeout: e.SMTPTimeout,
		}
	}
	if console == nil {
		console = os.Stdout
	}
	return &mail.Console{From: e.From, W: console}
}

// Users is the users read model the API reads; other API packages share it.
func (a *API) Users() *rm.Users { return a.users }

// Tokens is the token service.
func (a *API) Tokens() *token.Service { return a.tokens }

// Mount adds the sign-in endpoints to r.
func (a *API) Mount(r *mux.Router) {
	r.HandleFunc(PathOTPRequest, a.handleOTPRequest).Methods(http.MethodPost).Name("auth:otp-request")
	r.HandleFunc(PathOTPVerify, a.handleOTPVerify).Methods(http.MethodPost).Name("auth:otp-verify")
	r.HandleFunc(PathRefresh, a.handleRefresh).Methods(http.MethodPost).Name("auth:token-refresh")
	r.HandleFunc(PathLogout, a.handleLogout).Methods(http.MethodPost).Name("auth:logout")
	r.HandleFunc(PathLogin, a.handleLogin).Methods(http.MethodPost).Name("auth:login")
	r.HandleFunc(PathJWKS, a.handleJWKS).Methods(http.MethodGet, http.MethodHead).Name("auth:jwks")
}

func (a *API) handleJWKS(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(a.tokens.JWKS())
}

// meta is the event metadata of a request.
func meta(r *http.Request, actor string) events.Metadata {
	return events.Metadata{CorrelationID: web.RequestID(r.Context()), Actor: actor}
}

// Fail answers an error no handler expected: 503 when a dependency is down
// or too busy, nothing when the client has gone, else 500.
func Fail(w http.ResponseWriter, r *http.Request, err error) {
	var connErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case r.Context().Err() != nil:
		// The client left; nobody reads the answer.
		web.Error(w, 499, "client_closed", "client closed the request")
	case errors.Is(err, commands.ErrBusy):
		w.Header().Set("Retry-After", "1")
		web.Error(w, http.StatusServiceUnavailable, "busy", "too much concurrent activity, try again")
	case errors.As(err, &connErr), errors.As(err, &netErr), errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrClosed):
		web.Unavailable(w, r, "a backing service", err)
	default:
		web.Internal(w, r, err)
	}
}
