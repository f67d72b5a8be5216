package auth_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/deploy/config"

	"github.com/golang-jwt/jwt/v5"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/commands/user"
)

const (
	profilePath = "/api/profile/"
	refreshPath = "/api/auth/token/refresh/"
	logoutPath  = "/api/auth/logout/"
)

func wantUnauthorized(t *testing.T, r authtest.Response, what string) {
	t.Helper()
	if r.Status != http.StatusUnauthorized || r.Body["success"] != false || r.Str("code") == "" {
		t.Fatalf("%s: want 401, got %d %s", what, r.Status, r.Raw)
	}
}

// forge signs claims with any method and key, as an attacker would.
func forge(t *testing.T, method jwt.SigningMethod, key any, claims jwt.Claims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claimsOf reads a token's claims without checking it.
func claimsOf(t *testing.T, raw string) (token.Claims, map[string]any) {
	t.Helper()
	var c token.Claims
	tok, _, err := jwt.NewParser().ParseUnverified(raw, &c)
	if err != nil {
		t.Fatal(err)
	}
	return c, tok.Header
}

func TestTokenAttacksAreRefused(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	s := e.SignIn(t, authtest.Email("attack"))
	good, header := claimsOf(t, s.Access)
	if header["alg"] != "EdDSA" || good.Kind != token.Access || good.SessionID == "" || good.ID == "" ||
		good.Issuer != "cfgd" || len(good.Audience) != 1 || good.Audience[0] != "cfgd" || good.IssuedAt == nil ||
		good.Subject != strconv.FormatInt(s.UserID, 10) || good.ExpiresAt.Sub(good.IssuedAt.Time) != 15*time.Minute {
		t.Fatalf("access token claims: %+v header %v", good, header)
	}
	rc, _ := claimsOf(t, s.Refresh)
	if rc.Kind != token.Refresh || rc.ExpiresAt.Sub(rc.IssuedAt.Time) != 168*time.Hour || rc.SessionID != good.SessionID {
		t.Fatalf("refresh token claims: %+v", rc)
	}
	// The public key, as anyone can read it from the JWKS.
	var jwks struct {
		Keys []map[string]string `json:"keys"`
	}
	r := e.Do(t, http.MethodGet, "/.well-known/jwks.json", nil)
	if err := json.Unmarshal(r.Raw, &jwks); err != nil || len(jwks.Keys) != 1 {
		t.Fatalf("jwks: %s", r.Raw)
	}
	pub, err := base64.RawURLEncoding.DecodeString(jwks.Keys[0]["x"])
	if err != nil || len(pub) != ed25519.PublicKeySize || jwks.Keys[0]["kid"] != header["kid"] {
		t.Fatalf("jwks key: %v", jwks.Keys[0])
	}
	// The JWKS verifies a real token.
	if _, err := jwt.Parse(s.Access, func(*jwt.Token) (any, error) { return ed25519.PublicKey(pub), nil }, jwt.WithValidMethods([]string{"EdDSA"})); err != nil {
		t.Fatalf("token does not verify with the published key: %v", err)
	}
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)

	attacks := []struct {
		name string
		raw  string
	}{
		{"alg none", forge(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good, nil)},
		{"alg none with kid", forge(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good, map[string]any{"kid": header["kid"]})},
		{"HS256 keyed with the public key", forge(t, jwt.SigningMethodHS256, pub, good, map[string]any{"kid": header["kid"]})},
		{"HS256 keyed with the base64 public key", forge(t, jwt.SigningMethodHS256, []byte(jwks.Keys[0]["x"]), good, nil)},
		{"EdDSA with another key", forge(t, jwt.SigningMethodEdDSA, otherKey, good, map[string]any{"kid": header["kid"]})},
		{"tampered payload", tamper(t, s.Access)},
		{"signature stripped", strings.Join(strings.Split(s.Access, ".")[:2], ".") + "."},
		{"refresh token as access token", s.Refresh},
		{"garbage", "not.a.token"},
		{"empty", ""},
	}
	for _, a := range attacks {
		wantUnauthorized(t, e.Do(t, http.MethodGet, profilePath, nil, "Authorization", "Bearer "+a.raw), a.name)
	}
	// An access token is no refresh token.
	wantUnauthorized(t, e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": s.Access}), "access token as refresh token")
	wantUnauthorized(t, e.Do(t, http.MethodPost, logoutPath, map[string]string{"refresh": s.Access}), "access token to log out")
	// The real token still works.
	if r := e.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(s.Access)...); r.Status != http.StatusOK {
		t.Fatalf("good token: %d %s", r.Status, r.Raw)
	}
	// No credentials at all.
	r = e.Do(t, http.MethodGet, profilePath, nil)
	if r.Status != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d %s", r.Status, r.Raw)
	}
}

// tamper changes the subject of a token and keeps its signature.
func tamper(t *testing.T, raw string) string {
	parts := strings.Split(raw, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		t.Fatal(err)
	}
	m["sub"] = "1"
	b, _ := json.Marshal(m)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

func TestAccessTokenExpires(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	s := e.SignIn(t, authtest.Email("ttl"))
	e.Clock.Advance(15*time.Minute + 10*time.Second)
	wantUnauthorized(t, e.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(s.Access)...), "expired access token")
	// The refresh token (7 days) still gives a new one.
	r := e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": s.Refresh})
	if r.Status != http.StatusOK || r.Str("access") == "" {
		t.Fatalf("refresh: %d %s", r.Status, r.Raw)
	}
	if r := e.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(r.Str("access"))...); r.Status != http.StatusOK {
		t.Fatalf("new access token: %d %s", r.Status, r.Raw)
	}
	e.Clock.Advance(7 * 24 * time.Hour)
	wantUnauthorized(t, e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": s.Refresh}), "expired refresh token")
}

func TestRefreshWithoutRotation(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	s := e.SignIn(t, authtest.Email("refresh"))
	for i := range 2 {
		r := e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": s.Refresh})
		if r.Status != http.StatusOK || r.Str("access") == "" || r.Body["refresh"] != nil {
			t.Fatalf("refresh %d: %d %s", i, r.Status, r.Raw)
		}
		c, _ := claimsOf(t, r.Str("access"))
		if c.Kind != token.Access || c.Subject != strconv.FormatInt(s.UserID, 10) {
			t.Fatalf("refreshed claims %+v", c)
		}
	}
}

func TestRefreshRotationAndReuse(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{Config: func(c *signin.Config) { c.JWT.RotateRefresh = true }})
	s := e.SignIn(t, authtest.Email("rotate"))
	r := e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": s.Refresh})
	if r.Status != http.StatusOK || r.Str("access") == "" || r.Str("refresh") == "" || r.Str("refresh") == s.Refresh {
		t.Fatalf("rotating refresh: %d %s", r.Status, r.Raw)
	}
	second := r.Str("refresh")
	newAccess := r.Str("access")
	r = e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": second})
	if r.Status != http.StatusOK {
		t.Fatalf("second rotation: %d %s", r.Status, r.Raw)
	}
	third := r.Str("refresh")
	// Replaying the first, already rotated token revokes the whole session.
	wantUnauthorized(t, e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": s.Refresh}), "reused refresh token")
	wantUnauthorized(t, e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": third}), "newest refresh token after a reuse")
	eventually(t, 10*time.Second, "access tokens of the revoked session are refused", func() bool {
		return e.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(newAccess)...).Status == http.StatusUnauthorized &&
			e.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(s.Access)...).Status == http.StatusUnauthorized
	})
}

func TestLogout(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	email := authtest.Email("logout")
	s := e.SignIn(t, email)
	keep := e.SignIn(t, email) // a second session of the same user
	r := e.Do(t, http.MethodPost, logoutPath, map[string]string{"refresh": s.Refresh})
	if r.Status != http.StatusOK || r.Body["success"] != true {
		t.Fatalf("logout: %d %s", r.Status, r.Raw)
	}
	// The refresh token stops at once.
	wantUnauthorized(t, e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": s.Refresh}), "refresh after logout")
	// This instance refuses the access token at once.
	wantUnauthorized(t, e.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(s.Access)...), "access token after logout")
	// A second logout is harmless.
	if r := e.Do(t, http.MethodPost, logoutPath, map[string]string{"refresh": s.Refresh}); r.Status != http.StatusOK {
		t.Fatalf("second logout: %d %s", r.Status, r.Raw)
	}
	// The other session still works.
	if r := e.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(keep.Access)...); r.Status != http.StatusOK {
		t.Fatalf("other session: %d %s", r.Status, r.Raw)
	}
	if r := e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": keep.Refresh}); r.Status != http.StatusOK {
		t.Fatalf("other session refresh: %d %s", r.Status, r.Raw)
	}
}

// Another instance, which did not handle the logout, refuses the session's
// access tokens within seconds: its revocation set reloads from the
// session_revocations read model built from session.revoked.
func TestLogoutReachesOtherInstances(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	other := e.Replica(t)
	s := e.SignIn(t, authtest.Email("replica"))
	if r := other.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(s.Access)...); r.Status != http.StatusOK {
		t.Fatalf("replica before logout: %d %s", r.Status, r.Raw)
	}
	if r := e.Do(t, http.MethodPost, logoutPath, map[string]string{"refresh": s.Refresh}); r.Status != http.StatusOK {
		t.Fatalf("logout: %d %s", r.Status, r.Raw)
	}
	start := time.Now()
	eventually(t, 5*time.Second, "the replica refuses the access token", func() bool {
		return other.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(s.Access)...).Status == http.StatusUnauthorized
	})
	t.Logf("replica refused the token %v after logout", time.Since(start).Round(time.Millisecond))
	wantUnauthorized(t, other.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": s.Refresh}), "replica refresh after logout")
}

func TestHS256Mode(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("k", 40)
	e := authtest.Start(t, authtest.Options{Config: func(c *signin.Config) { c.JWT.Algorithm, c.JWT.SigningKey = "HS256", config.NewSecret(secret) }})
	s := e.SignIn(t, authtest.Email("hs"))
	c, header := claimsOf(t, s.Access)
	if header["alg"] != "HS256" {
		t.Fatalf("alg %v", header["alg"])
	}
	if r := e.Do(t, http.MethodGet, "/.well-known/jwks.json", nil); string(r.Raw) != `{"keys":[]}` {
		t.Fatalf("HS256 must publish no key: %s", r.Raw)
	}
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	for name, raw := range map[string]string{
		"EdDSA token on an HS256 server": forge(t, jwt.SigningMethodEdDSA, edKey, c, nil),
		"HS384 with the secret":          forge(t, jwt.SigningMethodHS384, []byte(secret), c, nil),
		"HS256 with another secret":      forge(t, jwt.SigningMethodHS256, []byte(strings.Repeat("x", 40)), c, nil),
		"alg none":                       forge(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, c, nil),
	} {
		wantUnauthorized(t, e.Do(t, http.MethodGet, profilePath, nil, "Authorization", "Bearer "+raw), name)
	}
	if r := e.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(s.Access)...); r.Status != http.StatusOK {
		t.Fatalf("good HS256 token: %d %s", r.Status, r.Raw)
	}
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTokenAnswersAreNeverStored: every answer of an endpoint that hands
// out tokens or sets the session cookie says no-store, failures included
// (a cache keyed loosely could otherwise serve one client's tokens to
// another), and every answer is nosniff.
func TestTokenAnswersAreNeverStored(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true, Config: func(c *signin.Config) { c.FailureFloor = time.Millisecond }})
	admin := authtest.Email("nostore")
	if _, err := user.NewCreateSuperuserHandler(e.Pool, e.Clock.Now).Handle(context.Background(), user.CreateSuperuser{Email: admin, Password: "correct horse battery"}); err != nil {
		t.Fatal(err)
	}
	email := authtest.Email("nostore")
	code := e.RequestCode(t, email)
	bad := e.Verify(t, email, wrong(code))
	good := e.Verify(t, email, code)
	if good.Status != http.StatusOK {
		t.Fatalf("verify: %d %s", good.Status, good.Raw)
	}
	refresh := good.Obj("tokens")["refresh"].(string)
	tests := []struct {
		name   string
		r      authtest.Response
		status int
	}{
		{"verify", good, http.StatusOK},
		{"verify, wrong code", bad, http.StatusBadRequest},
		{"verify, bad body", e.Do(t, http.MethodPost, verifyPath, `{}`), http.StatusBadRequest},
		{"refresh", e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": refresh}), http.StatusOK},
		{"refresh, bad token", e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": "x"}), http.StatusUnauthorized},
		{"login", e.Do(t, http.MethodPost, "/api/auth/login/", map[string]string{"email": admin, "password": "correct horse battery"}), http.StatusOK},
		{"login, wrong password", e.Do(t, http.MethodPost, "/api/auth/login/", map[string]string{"email": admin, "password": "wrong"}), http.StatusUnauthorized},
	}
	for _, tc := range tests {
		if tc.r.Status != tc.status || tc.r.Header.Get("Cache-Control") != "no-store" || tc.r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %d, Cache-Control %q, X-Content-Type-Options %q", tc.name, tc.r.Status, tc.r.Header.Get("Cache-Control"), tc.r.Header.Get("X-Content-Type-Options"))
		}
	}
	for _, path := range []string{requestPath, "/nowhere", "/.well-known/jwks.json"} {
		if r := e.Do(t, http.MethodGet, path, nil); r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d without nosniff", path, r.Status)
		}
	}
}
