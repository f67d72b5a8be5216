package settings

import (
	"net"
	"net/netip"
	"strings"

	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/mail"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/deploy/config"
)

// signinTarget is what the sign-in settings are read into: the core's
// Config and the two HTTP-side values that are read as text first.
type signinTarget struct {
	cfg          signin.Config
	cookieSecure string // auto, true or false
	proxies      []string
}

func newSigninTarget() *signinTarget {
	return &signinTarget{cfg: signin.DefaultConfig(), cookieSecure: "auto"}
}

func (t *signinTarget) fields() []field {
	c, e, j := &t.cfg, &t.cfg.Email, &t.cfg.JWT
	return []field{
		oneOf(&e.Backend, "EMAIL__BACKEND", "`console` prints each message (codes included: development only) to stdout; `smtp` sends it", "console", "smtp"),
		email(&e.From, "EMAIL__FROM", "sender address"),
		str(&e.SMTPHost, "EMAIL__SMTP_HOST", "SMTP server (required when `EMAIL__BACKEND=smtp`)"),
		intRange(&e.SMTPPort, "EMAIL__SMTP_PORT", "SMTP server port", 1, 65535),
		oneOf(&e.SMTPSecurity, "EMAIL__SMTP_SECURITY", "`starttls` (refuses a server without it), `tls` (implicit, port 465) or `none`",
			mail.SecurityStartTLS, mail.SecurityTLS, mail.SecurityNone),
		str(&e.SMTPUsername, "EMAIL__SMTP_USERNAME", "AUTH PLAIN user name when set"),
		secret(&e.SMTPPassword, "EMAIL__SMTP_PASSWORD", "AUTH PLAIN password (required with `EMAIL__SMTP_USERNAME`)"),
		positive(&e.SMTPTimeout, "EMAIL__SMTP_TIMEOUT", "bound on one send; connections are kept and reused"),
		oneOf(&j.Algorithm, "JWT__ALGORITHM", "`EdDSA` or `HS256`", token.EdDSA, token.HS256),
		secret(&j.SigningKey, "JWT__SIGNING_KEY", "EdDSA: PKCS#8 PEM or base64 32-byte seed; HS256: at least 32 bytes. Empty: the key file in `AUTH__KEYS_DIR`. Every replica needs the same keys (`cfgd keys generate`)"),
		secret(&j.VerifyKeys, "JWT__VERIFY_KEYS", "older keys that still verify the tokens they signed after a rotation: EdDSA PEM blocks or base64 seeds, HS256 secrets; comma-separated"),
		positive(&j.AccessTTL, "JWT__ACCESS_TTL", "access token lifetime"),
		positive(&j.RefreshTTL, "JWT__REFRESH_TTL", "refresh token (and API session) lifetime"),
		boolean(&j.RotateRefresh, "JWT__ROTATE_REFRESH", "hand out a new refresh token on each refresh; reuse of an old one revokes the session"),
		str(&j.Issuer, "JWT__ISSUER", "`iss` of the tokens"),
		str(&j.Audience, "JWT__AUDIENCE", "`aud` of the tokens"),
		positive(&j.RevocationPoll, "JWT__REVOCATION_POLL", "how often an instance reloads the revocation set"),
		positive(&j.KeysReload, "JWT__KEYS_RELOAD", "how often an instance reads the key file in `AUTH__KEYS_DIR` again, to follow `cfgd keys rotate` (a token naming a key it does not know reads the file at once if it changed since the last read)"),
		secret(&c.OTPHMACKey, "OTP__HMAC_KEY", "key the stored code HMACs use (at least 32 bytes); empty: a key file in `AUTH__KEYS_DIR`"),
		str(&c.KeysDir, "AUTH__KEYS_DIR", "the JWT, OTP and (when there) event signing key files, generated on first start (mode 0600, directory 0700) or by `cfgd keys generate`; several replicas share it (or set the keys)"),
		intRange(&c.IPRequests, "OTP__IP_REQUESTS", "OTP requests per client IP per window (any addresses)", 1, 1_000_000),
		intRange(&c.IPVerifications, "OTP__IP_VERIFICATIONS", "OTP verifications per client IP per window", 1, 1_000_000),
		positive(&c.IPWindow, "OTP__IP_WINDOW", "window of the two limits above"),
		positive(&c.SessionTTL, "ADMIN__SESSION_TTL", "admin cookie session lifetime"),
		intRange(&c.LoginFailures, "LOGIN__MAX_FAILURES", "failed password logins per address per window", 1, 1000),
		intRange(&c.LoginIPFailures, "LOGIN__IP_MAX_FAILURES", "failed password logins per client IP per window", 1, 100_000),
		positive(&c.LoginWindow, "LOGIN__WINDOW", "window of the two limits above"),
		str(&c.RedisPrefix, "AUTH__REDIS_PREFIX", "prefix of the throttle keys in Redis"),
		list(&c.DashboardHosts, "SOURCES__DASHBOARD_HOSTS", "host names categorised as `Dashboard`"),
		list(&c.RegistrationPaths, "SOURCES__REGISTRATION_PATHS", "paths categorised as `Website Registration`"),
		oneOf(&t.cookieSecure, "ADMIN__COOKIE_SECURE", "`auto`: the admin cookies are `Secure` (sent over HTTPS only) unless `HTTP__ADDR` is a loopback address (plain-HTTP local development); `true` or `false` override",
			"auto", "true", "false"),
		list(&t.proxies, "AUTH__TRUSTED_PROXIES", "IPs/CIDRs whose `X-Forwarded-For` is believed (rightmost untrusted hop is the client)"),
	}
}

// ReadSignin reads the sign-in settings (docs/settings.md has the table);
// problems are left in r, one per variable. Secrets are kept as
// config.Secret, so the configuration can be printed or logged whole
// without revealing them. httpAddr decides the default of
// ADMIN__COOKIE_SECURE.
func ReadSignin(r *config.Reader, httpAddr string) (signin.Config, auth.Config) {
	t := newSigninTarget()
	readAll(r, t.fields())
	s := t.cfg
	s.DashboardHosts = lower(s.DashboardHosts)
	if s.Email.Backend == "smtp" && s.Email.SMTPHost == "" {
		r.Fail("EMAIL__SMTP_HOST", "required: the SMTP server's host name when EMAIL__BACKEND=smtp", "")
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
	if s.JWT.VerifyKeys.IsSet() {
		if err := token.CheckVerifyKeys(s.JWT.Algorithm, s.JWT.VerifyKeys.Reveal()); err != nil {
			r.Fail("JWT__VERIFY_KEYS", "expected older keys of JWT__ALGORITHM, comma-separated: EdDSA PEM blocks or base64 32-byte seeds, HS256 secrets of at least 32 bytes", "")
		}
	}
	if s.OTPHMACKey.IsSet() && len(s.OTPHMACKey.Reveal()) < token.MinSecretLength {
		r.Fail("OTP__HMAC_KEY", "expected a secret of at least 32 bytes", "")
	}
	if s.JWT.RefreshTTL < s.JWT.AccessTTL {
		r.Fail("JWT__REFRESH_TTL", "expected a duration at least as long as JWT__ACCESS_TTL", s.JWT.RefreshTTL.String())
	}
	h := auth.Config{CookieSecure: cookieSecure(t.cookieSecure, httpAddr)}
	for _, p := range t.proxies {
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
	return s, h
}

// cookieSecure turns ADMIN__COOKIE_SECURE (true, false, or auto) into
// whether the admin cookies are Secure: auto marks them so unless cfgd
// serves plain HTTP on a loopback address (local development), where a
// browser would drop a Secure cookie.
func cookieSecure(mode, httpAddr string) bool {
	switch mode {
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
