package signin

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cfgd/cfgd/commands/mail"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/deploy/config"
)

// Config of the sign-in capability. cmd/settings fills it from the
// environment (docs/settings.md has the variable of each
// field); tests start from DefaultConfig and change what they need.
type Config struct {
	Email EmailConfig
	JWT   JWTConfig

	// OTPHMACKey is the server-side key codes are HMAC'd with; unset means
	// "use (or create) the key file in KeysDir".
	OTPHMACKey config.Secret
	KeysDir    string

	// Per-IP throttles on the OTP endpoints, against one client spraying
	// many addresses (the per-address limits are in the OTP aggregate).
	IPRequests      int
	IPVerifications int
	IPWindow        time.Duration

	// Admin password sign-in (login endpoint and HTTP Basic).
	SessionTTL      time.Duration
	LoginFailures   int // failed passwords per address per window
	LoginIPFailures int // failed passwords per client IP per window
	LoginWindow     time.Duration

	RedisPrefix string

	DashboardHosts    []string
	RegistrationPaths []string

	// FailureFloor is the least time an invalid_otp answer takes, so a
	// wrong, used, expired and unknown code cannot be told apart by timing.
	FailureFloor time.Duration
	// ReadWait bounds how long a read waits for the projection to reach
	// the user version a credential promises.
	ReadWait time.Duration
	// APIKeyCacheTTL is how long an API key lookup is reused (at most
	// apikeyrm.MaxCacheTTL, so a revocation is honoured within about a
	// second).
	APIKeyCacheTTL time.Duration
}

// EmailConfig chooses how OTP e-mail is sent.
type EmailConfig struct {
	Backend      string // console or smtp
	From         string
	SMTPHost     string
	SMTPPort     int
	SMTPSecurity string
	SMTPUsername string
	SMTPPassword config.Secret
	SMTPTimeout  time.Duration
}

// JWTConfig chooses how tokens are signed.
type JWTConfig struct {
	Algorithm  string
	SigningKey config.Secret // unset: key file in KeysDir
	// VerifyKeys are older keys that still verify the tokens they signed
	// after a rotation (JWT__VERIFY_KEYS).
	VerifyKeys     config.Secret
	AccessTTL      time.Duration
	RefreshTTL     time.Duration
	RotateRefresh  bool
	Issuer         string
	Audience       string
	RevocationPoll time.Duration
	// KeysReload is how often a replica reads the key file in KeysDir
	// again, to follow a rotation (JWT__KEYS_RELOAD).
	KeysReload time.Duration
}

// MaxTokenLifetime is the longest any token lives: a key that stopped
// signing longer ago than this verifies nothing still valid.
func (c Config) MaxTokenLifetime() time.Duration {
	return max(c.JWT.AccessTTL, c.JWT.RefreshTTL, c.SessionTTL)
}

// DefaultFailureFloor comfortably exceeds the slowest failure path (a load
// plus an append) on a loaded host.
const DefaultFailureFloor = 40 * time.Millisecond

// DefaultConfig is the configuration with every default; cmd/settings
// reads each variable over it and docs/settings.md shows them.
func DefaultConfig() Config {
	return Config{
		Email: EmailConfig{
			Backend: "console", From: "no-reply@localhost", SMTPPort: 587,
			SMTPSecurity: mail.SecurityStartTLS, SMTPTimeout: 10 * time.Second,
		},
		JWT: JWTConfig{
			Algorithm: token.EdDSA, AccessTTL: 15 * time.Minute, RefreshTTL: 168 * time.Hour,
			Issuer: "cfgd", Audience: "cfgd", RevocationPoll: time.Second, KeysReload: token.ReloadEvery,
		},
		KeysDir:           "./data/keys",
		IPRequests:        20,
		IPVerifications:   60,
		IPWindow:          time.Hour,
		SessionTTL:        12 * time.Hour,
		LoginFailures:     5,
		LoginIPFailures:   20,
		LoginWindow:       15 * time.Minute,
		RedisPrefix:       "cfgd:auth:",
		DashboardHosts:    []string{"dashboard.localhost"},
		RegistrationPaths: []string{"/register/", "/signup/"},
		FailureFloor:      DefaultFailureFloor,
		ReadWait:          5 * time.Second,
		APIKeyCacheTTL:    time.Second,
	}
}

// Validate joins every problem of c, each naming its field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("signin: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	switch c.Email.Backend {
	case "console":
	case "smtp":
		if c.Email.SMTPHost == "" {
			bad("Email.SMTPHost", "required with the smtp backend")
		}
	default:
		bad("Email.Backend", "expected console or smtp, got %q", c.Email.Backend)
	}
	if c.Email.SMTPUsername != "" && !c.Email.SMTPPassword.IsSet() {
		bad("Email.SMTPPassword", "required when an SMTP user name is set")
	}
	switch c.JWT.Algorithm {
	case token.EdDSA:
		if c.JWT.SigningKey.IsSet() {
			if _, err := token.ParseEd25519(c.JWT.SigningKey.Reveal()); err != nil {
				bad("JWT.SigningKey", "expected an Ed25519 key: a PKCS#8 PEM block or the base64 of a 32-byte seed")
			}
		}
	case token.HS256:
		if c.JWT.SigningKey.IsSet() && len(c.JWT.SigningKey.Reveal()) < token.MinSecretLength {
			bad("JWT.SigningKey", "expected an HS256 secret of at least 32 bytes")
		}
	default:
		bad("JWT.Algorithm", "expected %s or %s, got %q", token.EdDSA, token.HS256, c.JWT.Algorithm)
	}
	if c.JWT.VerifyKeys.IsSet() && (c.JWT.Algorithm == token.EdDSA || c.JWT.Algorithm == token.HS256) {
		if err := token.CheckVerifyKeys(c.JWT.Algorithm, c.JWT.VerifyKeys.Reveal()); err != nil {
			bad("JWT.VerifyKeys", "%v", err)
		}
	}
	if c.OTPHMACKey.IsSet() && len(c.OTPHMACKey.Reveal()) < token.MinSecretLength {
		bad("OTPHMACKey", "expected a secret of at least 32 bytes")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"JWT.AccessTTL", c.JWT.AccessTTL}, {"JWT.RefreshTTL", c.JWT.RefreshTTL}, {"JWT.RevocationPoll", c.JWT.RevocationPoll}, {"JWT.KeysReload", c.JWT.KeysReload},
		{"IPWindow", c.IPWindow}, {"SessionTTL", c.SessionTTL}, {"LoginWindow", c.LoginWindow}, {"ReadWait", c.ReadWait},
	} {
		if d.v <= 0 {
			bad(d.name, "expected a positive duration, got %s", d.v)
		}
	}
	if c.JWT.RefreshTTL < c.JWT.AccessTTL {
		bad("JWT.RefreshTTL", "expected a duration at least as long as the access TTL")
	}
	for _, n := range []struct {
		name string
		v    int
	}{
		{"IPRequests", c.IPRequests}, {"IPVerifications", c.IPVerifications},
		{"LoginFailures", c.LoginFailures}, {"LoginIPFailures", c.LoginIPFailures},
	} {
		if n.v < 1 {
			bad(n.name, "expected at least 1, got %d", n.v)
		}
	}
	if c.FailureFloor < 0 {
		bad("FailureFloor", "expected zero or more, got %s", c.FailureFloor)
	}
	for _, p := range c.RegistrationPaths {
		if !strings.HasPrefix(p, "/") {
			bad("RegistrationPaths", "expected paths starting with /, got %q", p)
		}
	}
	if c.KeysDir == "" && (!c.JWT.SigningKey.IsSet() || !c.OTPHMACKey.IsSet()) {
		errs = append(errs, errors.New("signin: KeysDir: required unless both the JWT signing key and the OTP HMAC key are set"))
	}
	return errors.Join(errs...)
}
