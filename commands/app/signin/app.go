// Package signin is the application core of passwordless sign-in: its
// commands (commands/otp, commands/session, commands/user), its queries
// (readmodels/identity), the token service, the mailer, the Redis
// throttles and the Authenticator that turns credentials into a Principal.
// New assembles it once; the HTTP handlers (api/auth), the gRPC services,
// the CLI and the tests all use what it returns, and none of them wires
// handlers by hand.
package signin

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/commands/mail"
	"github.com/cfgd/cfgd/commands/otp"
	"github.com/cfgd/cfgd/commands/session"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
	"github.com/cfgd/cfgd/readmodels/identityview"
)

// Deps are the connections and overrides New needs besides Config.
type Deps struct {
	Pool  *pgxpool.Pool
	Redis redis.Cmdable
	Log   *slog.Logger
	// Mail overrides the sender chosen by the configuration (tests).
	Mail mail.Sender
	// Console is where the console e-mail backend prints; default stdout.
	Console io.Writer
	// Now is the clock of every command and token check; default time.Now.
	Now func() time.Time
	// Events sets the limits of every append (EVENTS__MAX_BYTES); nil:
	// the store's defaults.
	Events *store.Store
	// Usage takes every request an API key authenticated, at server time
	// (events/apikey.UsageRecorder); nil: uses are not counted (tests,
	// CLI).
	Usage Usage
}

// Usage records one request authenticated by key keyID at at. It must not
// block: the request is waiting.
type Usage interface {
	Record(keyID int64, at time.Time)
}

// App is the sign-in capability assembled.
type App struct {
	Config Config
	Log    *slog.Logger
	Now    func() time.Time

	Tokens      *token.Service
	Users       *identityview.Users
	Revocations *identityview.Revocations
	Limiter     *Limiter
	Auth        *Authenticator

	// Generated are the key files this start created: a replica that
	// made its own keys does not share them with any other.
	Generated []string

	RequestOTP      *otp.RequestHandler
	VerifyOTP       *otp.VerifyHandler
	Refresh         *session.RefreshHandler
	Logout          *session.LogoutHandler
	Login           *session.LoginHandler
	UpdateProfile   *user.UpdateProfileHandler
	ChangeAvatar    *user.ChangeAvatarHandler
	CreateSuperuser *user.CreateSuperuserHandler

	secret []byte
}

// New loads (or creates) the keys and assembles the commands, queries and
// authenticator of sign-in.
func New(cfg Config, d Deps) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Pool == nil || d.Redis == nil {
		return nil, errors.New("signin: a Postgres pool and a Redis client are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	src := token.Source{Alg: cfg.JWT.Algorithm, SigningKey: cfg.JWT.SigningKey.Reveal(), VerifyKeys: cfg.JWT.VerifyKeys.Reveal(), Dir: cfg.KeysDir}
	keys, err := src.Load()
	if err != nil {
		return nil, fmt.Errorf("signin: signing key (JWT__SIGNING_KEY or %s): %w", cfg.KeysDir, err)
	}
	var generated []string
	if keys.Generated() != "" {
		generated = append(generated, keys.Generated())
	}
	tcfg := token.Config{
		Issuer: cfg.JWT.Issuer, Audience: cfg.JWT.Audience,
		AccessTTL: cfg.JWT.AccessTTL, RefreshTTL: cfg.JWT.RefreshTTL, WebTTL: cfg.SessionTTL, Now: d.Now,
		ReloadEvery: cfg.JWT.KeysReload,
		ReloadFailed: func(err error) {
			d.Log.Warn("signin: reload the JWT keys (keeping the keys loaded before)", "err", err)
		},
	}
	var tokens *token.Service
	if src.SigningKey == "" {
		// The key file may sit on storage every replica shares: read it
		// again, so a rotation reaches this replica without a restart.
		src.NoCreate = true
		tokens, err = token.NewReloading(tcfg, keys, src)
	} else {
		tokens, err = token.New(tcfg, keys)
	}
	if err != nil {
		return nil, err
	}
	secret := []byte(cfg.OTPHMACKey.Reveal())
	if len(secret) == 0 {
		path := filepath.Join(cfg.KeysDir, OTPKeyFile)
		var created bool
		if secret, created, err = token.LoadOrCreateSecret(path); err != nil {
			return nil, fmt.Errorf("signin: OTP HMAC key (OTP__HMAC_KEY or %s): %w", cfg.KeysDir, err)
		}
		if created {
			generated = append(generated, path)
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
		sender = newSender(cfg.Email, d.Console)
	}
	sources := user.Sources{DashboardHosts: cfg.DashboardHosts, RegistrationPaths: cfg.RegistrationPaths}
	// Commands append through db, which carries the configured limits.
	var db store.DB = d.Pool
	if d.Events != nil {
		db = d.Events.Bind(d.Pool)
	}
	a := &App{
		Config: cfg, Log: d.Log, Now: d.Now, Tokens: tokens, secret: secret, Generated: generated,
		Users:           identityview.NewUsers(d.Pool, cfg.ReadWait),
		Revocations:     identityview.NewRevocations(d.Pool, cfg.JWT.RevocationPoll, cfg.JWT.AccessTTL, d.Now, cfg.ReadWait),
		Limiter:         NewLimiter(d.Redis, cfg.RedisPrefix),
		RequestOTP:      otp.NewRequestHandler(db, hasher, templates, sender, d.Now, d.Log),
		VerifyOTP:       otp.NewVerifyHandler(db, hasher, tokens, sources, d.Now),
		Refresh:         session.NewRefreshHandler(db, tokens, cfg.JWT.RotateRefresh, d.Now),
		Logout:          session.NewLogoutHandler(db, d.Now),
		Login:           session.NewLoginHandler(db, tokens, d.Now),
		UpdateProfile:   user.NewUpdateProfileHandler(db, d.Now),
		ChangeAvatar:    user.NewChangeAvatarHandler(db, d.Now),
		CreateSuperuser: user.NewCreateSuperuserHandler(db, d.Now),
	}
	apiKeys, err := apikeyview.NewAuthenticator(d.Pool, apikeyview.Config{CacheTTL: cfg.APIKeyCacheTTL, Now: d.Now, CurrentWait: cfg.ReadWait})
	if err != nil {
		return nil, err
	}
	a.Auth = &Authenticator{app: a, pool: d.Pool, keys: apiKeys, usage: d.Usage}
	return a, nil
}

// OTPKeyFile is the OTP HMAC key's file in KeysDir.
const OTPKeyFile = "otp-hmac.key"

// DeriveKey returns a key for one purpose (say, "cfgd csrf v1") derived from
// the server secret, so every cfgd process derives the same one.
func (a *App) DeriveKey(purpose string) []byte {
	m := hmac.New(sha256.New, a.secret)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

func newSender(e EmailConfig, console io.Writer) mail.Sender {
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
