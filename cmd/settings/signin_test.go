package settings

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/deploy/config"
)

func TestReadSigninDefaults(t *testing.T) {
	r := config.NewReader(config.FromMaps(nil, nil))
	s, _ := ReadSignin(r, DefaultCore().HTTPAddr)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if s.Email.Backend != "console" || s.JWT.Algorithm != "EdDSA" || s.JWT.AccessTTL != 15*time.Minute || s.JWT.RefreshTTL != 168*time.Hour ||
		s.JWT.RotateRefresh || s.KeysDir != "./data/keys" || s.IPRequests != 20 || s.LoginFailures != 5 || s.Email.SMTPSecurity != "starttls" {
		t.Fatalf("defaults: %+v", s)
	}
}

func TestSettingsNeverPrintSecrets(t *testing.T) {
	secrets := map[string]string{
		"JWT__ALGORITHM": "HS256", "JWT__SIGNING_KEY": "jwt-secret-0123456789-0123456789-xyz",
		"OTP__HMAC_KEY": "otp-secret-0123456789-0123456789-xyz", "EMAIL__SMTP_USERNAME": "u", "EMAIL__SMTP_PASSWORD": "smtp-pass-42",
	}
	r := config.NewReader(config.FromMaps(secrets, nil))
	s, _ := ReadSignin(r, DefaultCore().HTTPAddr)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprintf("%v", s), fmt.Sprintf("%+v", s), fmt.Sprintf("%#v", s)} {
		for _, k := range []string{"JWT__SIGNING_KEY", "OTP__HMAC_KEY", "EMAIL__SMTP_PASSWORD"} {
			if strings.Contains(out, secrets[k]) {
				t.Fatalf("%s printed: %s", k, out)
			}
		}
	}
	if s.JWT.SigningKey.Reveal() != secrets["JWT__SIGNING_KEY"] {
		t.Fatal("the secret itself is lost")
	}
}

func TestReadSigninProblems(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want []string // one line per variable, in order
	}{
		{map[string]string{"EMAIL__BACKEND": "smtp"}, []string{"EMAIL__SMTP_HOST: required"}},
		{map[string]string{"EMAIL__BACKEND": "carrier-pigeon"}, []string{"EMAIL__BACKEND: expected one of console, smtp"}},
		{map[string]string{"JWT__ALGORITHM": "none"}, []string{"JWT__ALGORITHM: expected one of EdDSA, HS256"}},
		{map[string]string{"JWT__ALGORITHM": "HS256", "JWT__SIGNING_KEY": "short-secret"}, []string{"JWT__SIGNING_KEY: expected an HS256 secret of at least 32 bytes"}},
		{map[string]string{"JWT__SIGNING_KEY": "not-a-key"}, []string{"JWT__SIGNING_KEY: expected an Ed25519 key"}},
		{map[string]string{"OTP__HMAC_KEY": "short"}, []string{"OTP__HMAC_KEY: expected a secret of at least 32 bytes"}},
		{map[string]string{"JWT__ACCESS_TTL": "15 minutes", "JWT__REFRESH_TTL": "0s"}, []string{"JWT__ACCESS_TTL:", "JWT__REFRESH_TTL:"}},
		{map[string]string{"JWT__ACCESS_TTL": "2h", "JWT__REFRESH_TTL": "1h"}, []string{"JWT__REFRESH_TTL: expected a duration at least as long as JWT__ACCESS_TTL"}},
		{map[string]string{"EMAIL__SMTP_USERNAME": "u"}, []string{"EMAIL__SMTP_PASSWORD: required when EMAIL__SMTP_USERNAME is set"}},
		{map[string]string{"AUTH__TRUSTED_PROXIES": "10.0.0.0/8,nonsense"}, []string{`AUTH__TRUSTED_PROXIES: expected IP addresses or CIDR prefixes such as 10.0.0.0/8, got "nonsense"`}},
		{map[string]string{"SOURCES__REGISTRATION_PATHS": "register"}, []string{"SOURCES__REGISTRATION_PATHS: expected paths starting with /"}},
		{map[string]string{"OTP__IP_REQUESTS": "0"}, []string{"OTP__IP_REQUESTS: expected an integer from 1"}},
	}
	for _, tc := range tests {
		r := config.NewReader(config.FromMaps(tc.env, nil))
		ReadSignin(r, DefaultCore().HTTPAddr)
		err := r.Err()
		if err == nil {
			t.Errorf("%v: no error", tc.env)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(tc.want) {
			t.Errorf("%v: %q", tc.env, lines)
			continue
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("%v: line %q, want prefix %q", tc.env, lines[i], w)
			}
		}
		// Secrets never appear in an error line.
		for k, v := range tc.env {
			if (strings.Contains(k, "KEY") || strings.Contains(k, "PASSWORD")) && strings.Contains(err.Error(), v) {
				t.Errorf("%s echoed: %v", k, err)
			}
		}
	}
}

func TestCookieSecureUnlessPlainHTTPOnLoopback(t *testing.T) {
	tests := []struct {
		httpAddr, setting string
		want              bool
	}{
		{"127.0.0.1:8080", "", false},
		{"[::1]:8080", "", false},
		{"localhost:8080", "", false},
		{"0.0.0.0:8080", "", true},
		{"10.1.2.3:8080", "", true},
		{"127.0.0.1:8080", "true", true},
		{"0.0.0.0:8080", "false", false},
	}
	for _, tc := range tests {
		env := map[string]string{}
		if tc.setting != "" {
			env["ADMIN__COOKIE_SECURE"] = tc.setting
		}
		r := config.NewReader(config.FromMaps(env, nil))
		_, h := ReadSignin(r, tc.httpAddr)
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		if h.CookieSecure != tc.want {
			t.Errorf("%s with %q: Secure=%v, want %v", tc.httpAddr, tc.setting, h.CookieSecure, tc.want)
		}
	}
}
