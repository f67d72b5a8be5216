package token_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/cfgd/cfgd/commands/token"
)

func service(t testing.TB, keys *token.Keys, cfg token.Config) *token.Service {
	t.Helper()
	if cfg.Issuer == "" {
		cfg = token.Config{Issuer: "cfgd", Audience: "cfgd", AccessTTL: 15 * time.Minute, RefreshTTL: 168 * time.Hour, WebTTL: time.Hour, Now: cfg.Now}
	}
	s, err := token.New(cfg, keys)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func edKeys(t testing.TB) (*token.Keys, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := token.NewEd25519(priv)
	if err != nil {
		t.Fatal(err)
	}
	return k, priv
}

func TestIssueAndParse(t *testing.T) {
	keys, priv := edKeys(t)
	s := service(t, keys, token.Config{})
	iss, err := s.Issue(token.Spec{Kind: token.Access, UserID: 42, SessionID: "s-1", UserVersion: 3})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Parse(iss.Token, token.Access)
	if err != nil || c.UserID() != 42 || c.SessionID != "s-1" || c.UserVersion != 3 || c.ID == "" {
		t.Fatalf("parse: %+v %v", c, err)
	}
	for _, k := range []token.Kind{token.Refresh, token.Web} {
		if _, err := s.Parse(iss.Token, k); !errors.Is(err, token.ErrInvalid) {
			t.Errorf("an access token parsed as %s: %v", k, err)
		}
	}

	// Signed with the right key but wrong in content.
	good := iss.Claims
	sign := func(mut func(c *token.Claims)) string {
		c := good
		c.Audience = append(jwt.ClaimStrings(nil), good.Audience...)
		mut(&c)
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
		raw, err := tok.SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for name, raw := range map[string]string{
		"wrong issuer":   sign(func(c *token.Claims) { c.Issuer = "evil" }),
		"wrong audience": sign(func(c *token.Claims) { c.Audience = jwt.ClaimStrings{"other"} }),
		"no expiry":      sign(func(c *token.Claims) { c.ExpiresAt = nil }),
		"expired":        sign(func(c *token.Claims) { c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Minute)) }),
		"issued in the future": sign(func(c *token.Claims) {
			c.IssuedAt = jwt.NewNumericDate(time.Now().Add(time.Hour))
		}),
		"no session":    sign(func(c *token.Claims) { c.SessionID = "" }),
		"no jti":        sign(func(c *token.Claims) { c.ID = "" }),
		"bad subject":   sign(func(c *token.Claims) { c.Subject = "root" }),
		"zero subject":  sign(func(c *token.Claims) { c.Subject = "0" }),
		"no kind":       sign(func(c *token.Claims) { c.Kind = "" }),
		"kind refresh":  sign(func(c *token.Claims) { c.Kind = token.Refresh }),
		"oversized":     strings.Repeat("a", token.MaxTokenLength+1),
		"three dots":    "a.b.c.d",
		"none":          noneToken(t, good),
		"hs256 pub key": hsToken(t, good, priv.Public().(ed25519.PublicKey)),
	} {
		if _, err := s.Parse(raw, token.Access); !errors.Is(err, token.ErrInvalid) {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
}

func noneToken(t *testing.T, c token.Claims) string {
	raw, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func hsToken(t *testing.T, c token.Claims, key []byte) string {
	raw, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestLoadCreatesOneKeyOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	var wg sync.WaitGroup
	jwks := make([]string, 6)
	for i := range jwks {
		wg.Go(func() {
			k, err := token.Load(token.EdDSA, "", dir)
			if err != nil {
				t.Error(err)
				return
			}
			jwks[i] = string(service(t, k, token.Config{}).JWKS())
		})
	}
	wg.Wait()
	for _, j := range jwks[1:] {
		if j != jwks[0] {
			t.Fatalf("concurrent loads made different keys")
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "jwt-ed25519.pem"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if d, _ := os.Stat(dir); d.Mode().Perm() != 0o700 {
		t.Fatalf("key dir mode %v", d.Mode().Perm())
	}
	if _, err := token.Load(token.HS256, "short", dir); err == nil {
		t.Fatal("short HS256 secret accepted")
	}
	if _, err := token.ParseEd25519("AAAA"); err == nil {
		t.Fatal("short seed accepted")
	}
}

func FuzzParse(f *testing.F) {
	keys, _ := edKeys(f)
	s := service(f, keys, token.Config{})
	good, _ := s.Issue(token.Spec{Kind: token.Access, UserID: 1, SessionID: "s"})
	f.Add(good.Token)
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0.")
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := s.Parse(raw, token.Access)
		if err == nil && raw != good.Token {
			// Only a token this service signed may pass; anything else
			// passing is a forgery (Ed25519 signatures are not malleable).
			t.Fatalf("accepted a token it did not issue: %q -> %+v", raw, c)
		}
		if err != nil && !errors.Is(err, token.ErrInvalid) {
			t.Fatalf("error outside ErrInvalid: %v", err)
		}
	})
}
