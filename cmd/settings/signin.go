package settings

import (
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/mail"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/deploy/config"
)

// ReadSignin reads the sign-in settings (README.md, Passwordless sign-in,
// has the table); problems are left in r, one per variable. Secrets are
// read with r.Secret and kept as config.Secret, so the configuration can be
// printed or logged whole without revealing them. httpAddr decides the
// default of ADMIN__COOKIE_SECURE.
func ReadSignin(r *config.Reader, httpAddr string) (signin.Config, auth.Config) {
	d := signin.DefaultConfig()
	s := signin.Config{
		Email: signin.EmailConfig{
			Backend:      r.OneOf("EMAIL__BACKEND", "console", "console", "smtp"),
			From:         r.Email("EMAIL__FROM", "no-reply@localhost", false),
			SMTPPort:     r.IntRange("EMAIL__SMTP_PORT", 587, 1, 65535),
			SMTPSecurity: r.OneOf("EMAIL__SMTP_SECURITY", mail.SecurityStartTLS, mail.SecurityStartTLS, mail.SecurityTLS, mail.SecurityNone),
			SMTPUsername: r.String("EMAIL__SMTP_USERNAME", ""),
			SMTPPassword: config.NewSecret(r.Secret("EMAIL__SMTP_PASSWORD", false)),
			SMTPTimeout:  r.PositiveDuration("EMAIL__SMTP_TIMEOUT", 10*time.Second),
		},
		JWT: signin.JWTConfig{
			Algorithm:      r.OneOf("JWT__ALGORITHM", token.EdDSA, token.EdDSA, token.HS256),
			SigningKey:     config.NewSecret(r.Secret("JWT__SIGNING_KEY", false)),
			AccessTTL:      r.PositiveDuration("JWT__ACCESS_TTL", 15*time.Minute),
			RefreshTTL:     r.PositiveDuration("JWT__REFRESH_TTL", 168*time.Hour),
			RotateRefresh:  r.Bool("JWT__ROTATE_REFRESH", false),
			Issuer:         r.String("JWT__ISSUER", "cfgd"),
			Audience:       r.String("JWT__AUDIENCE", "cfgd"),
			RevocationPoll: r.PositiveDuration("JWT__REVOCATION_POLL", time.Second),
		},
		OTPHMACKey:        config.NewSecret(r.Secret("OTP__HMAC_KEY", false)),
		KeysDir:           r.String("AUTH__KEYS_DIR", "./data/keys"),
		IPRequests:        r.IntRange("OTP__IP_REQUESTS", 20, 1, 1_000_000),
		IPVerifications:   r.IntRange("OTP__IP_VERIFICATIONS", 60, 1, 1_000_000),
		IPWindow:          r.PositiveDuration("OTP__IP_WINDOW", time.Hour),
		SessionTTL:        r.PositiveDuration("ADMIN__SESSION_TTL", 12*time.Hour),
		LoginFailures:     r.IntRange("LOGIN__MAX_FAILURES", 5, 1, 1000),
		LoginIPFailures:   r.IntRange("LOGIN__IP_MAX_FAILURES", 20, 1, 100_000),
		LoginWindow:       r.PositiveDuration("LOGIN__WINDOW", 15*time.Minute),
		RedisPrefix:       r.String("AUTH__REDIS_PREFIX", "cfgd:auth:"),
		DashboardHosts:    lower(r.List("SOURCES__DASHBOARD_HOSTS", []string{"dashboard.localhost"})),
		RegistrationPaths: r.List("SOURCES__REGISTRATION_PATHS", []string{"/register/", "/signup/"}),
	}
	if s.Email.Backend == "smtp" {
		s.Email.SMTPHost = r.Required("EMAIL__SMTP_HOST", "the SMTP server's host name when EMAIL__BACKEND=smtp")
	} else {
		s.Email.SMTPHost = r.String("EMAIL__SMTP_HOST", "")
	}
	if s.Email.SMTPUsername != "" && !s.Email.SMTPPassword.IsSet() {
		r.Fail("EMAIL__SMTP_PASSWORD", "required when EMAIL__SMTP_USERNAME is set", "")
	}
	if s.JWT.SigningKey.IsSet() {
		switch s.JWT.Algorithm {
		case token.EdDSA:
			if _, err := token.ParseEd25519(s.JWT.SigningKey.Reveal()); err != nil {
				r.Fail("JWT__SIGNING_KEY", "expected an Ed25519 key: a PKCS#8 PEM block or the base64 of a 32-byte seed", "")
			}
		case token.HS256:
			if len(s.JWT.SigningKey.Reveal()) < token.MinSecretLength {
				r.Fail("JWT__SIGNING_KEY", "expected an HS256 secret of at least 32 bytes", "")
			}
		}
	}
	if s.OTPHMACKey.IsSet() && len(s.OTPHMACKey.Reveal()) < token.MinSecretLength {
		r.Fail("OTP__HMAC_KEY", "expected a secret of at least 32 bytes", "")
	}
	if s.JWT.RefreshTTL < s.JWT.AccessTTL {
		r.Fail("JWT__REFRESH_TTL", "expected a duration at least as long as JWT__ACCESS_TTL", s.JWT.RefreshTTL.String())
	}
	h := auth.Config{CookieSecure: cookieSecure(r, httpAddr)}
	for _, p := range r.List("AUTH__TRUSTED_PROXIES", nil) {
		pfx, err := parsePrefix(p)
		if err != nil {
			r.Fail("AUTH__TRUSTED_PROXIES", "expected IP addresses or CIDR prefixes such as 10.0.0.0/8", p)
			continue
		}
		h.TrustedProxies = append(h.TrustedProxies, pfx)
	}
	for _, p := range s.RegistrationPaths {
		if !strings.HasPrefix(p, "/") {
			r.Fail("SOURCES__REGISTRATION_PATHS", "expected paths starting with /", p)
		}
	}
	s.FailureFloor, s.ReadWait = d.FailureFloor, d.ReadWait
	return s, h
}

// cookieSecure reads ADMIN__COOKIE_SECURE: true, false, or auto (the
// default), which marks the admin cookies Secure unless cfgd serves plain
// HTTP on a loopback address (local development), where a browser would
// drop a Secure cookie.
func cookieSecure(r *config.Reader, httpAddr string) bool {
	switch r.OneOf("ADMIN__COOKIE_SECURE", "auto", "auto", "true", "false") {
	case "true":
		return true
	case "false":
		return false
	}
	host, _, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err != nil || !ip.IsLoopback()
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

func lower(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		h := strings.ToLower(s)
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
		out[i] = h
	}
	return out
}
