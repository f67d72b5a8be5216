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

// Access tokens are RFC 9068 (typ at+jwt, client_id); refresh tokens have
// their own typ and audience. A token with the typ or audience of another
// kind is refused, and tokens issued before the kinds had types of their
// own (typ JWT, the access audience) pass as their token_type says until
// they expire.
func TestTokenTypesAndAudiences(t *testing.T) {
	keys, priv := edKeys(t)
	s := service(t, keys, token.Config{})
	header := func(raw string) map[string]any {
		tok, _, err := jwt.NewParser().ParseUnverified(raw, &token.Claims{})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Header
	}
	access, err := s.Issue(token.Spec{Kind: token.Access, UserID: 7, SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	refresh, err := s.Issue(token.Spec{Kind: token.Refresh, UserID: 7, SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if h := header(access.Token); h["typ"] != "at+jwt" || access.Claims.ClientID != "cfgd" || access.Claims.Audience[0] != "cfgd" {
		t.Fatalf("access token: header %v claims %+v", h, access.Claims)
	}
	if h := header(refresh.Token); h["typ"] != "refresh+jwt" || refresh.Claims.Audience[0] != token.RefreshAudience("cfgd") || refresh.Claims.ClientID != "" {
		t.Fatalf("refresh token: header %v claims %+v", h, refresh.Claims)
	}
	signed := func(c token.Claims, typ string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
		tok.Header["typ"] = typ
		raw, err := tok.SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	withAud := func(c token.Claims, aud string) token.Claims {
		c.Audience = jwt.ClaimStrings{aud}
		return c
	}
	tests := []struct {
		name string
		raw  string
		kind token.Kind
		ok   bool
	}{
		{"access", access.Token, token.Access, true},
		{"refresh", refresh.Token, token.Refresh, true},
		{"access typed as refresh", signed(access.Claims, "refresh+jwt"), token.Access, false},
		{"refresh typed as access", signed(refresh.Claims, "at+jwt"), token.Refresh, false},
		{"access with the refresh audience", signed(withAud(access.Claims, token.RefreshAudience("cfgd")), "at+jwt"), token.Access, false},
		{"refresh with the access audience", signed(withAud(refresh.Claims, "cfgd"), "refresh+jwt"), token.Refresh, false},
		{"unknown typ", signed(access.Claims, "dpop+jwt"), token.Access, false},
		{"no typ", signed(access.Claims, ""), token.Access, false},
		{"pre-change access", signed(access.Claims, "JWT"), token.Access, true},
		{"pre-change refresh", signed(withAud(refresh.Claims, "cfgd"), "JWT"), token.Refresh, true},
		{"pre-change refresh as access", signed(withAud(refresh.Claims, "cfgd"), "JWT"), token.Access, false},
		{"pre-change typ with the refresh audience", signed(refresh.Claims, "JWT"), token.Refresh, false},
	}
	for _, tc := range tests {
		_, err := s.Parse(tc.raw, tc.kind)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, token.ErrInvalid)) {
			t.Errorf("%s as %s: %v, want ok=%v", tc.name, tc.kind, err, tc.ok)
		}
	}
}
