package auth_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
)

// thirdParty verifies access tokens as a resource server that knows only
// cfgd's discovery URL would (RFC 9068 section 4), with go-jose: the JWKS
// found through the discovery document, typ at+jwt, the signature, iss,
// aud, exp, and the claims RFC 9068 requires.
type thirdParty struct {
	issuer string
	keys   jose.JSONWebKeySet
}

func discover(t *testing.T, e *authtest.Env) thirdParty {
	t.Helper()
	r := e.Do(t, http.MethodGet, "/.well-known/openid-configuration", nil)
	issuer, jwksURI := r.Str("issuer"), r.Str("jwks_uri")
	if r.Status != http.StatusOK || issuer == "" || !strings.HasPrefix(jwksURI, "http") {
		t.Fatalf("discovery: %d %s", r.Status, r.Raw)
	}
	resp, err := http.Get(jwksURI)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil || len(set.Keys) == 0 {
		t.Fatalf("JWKS at %s: %v %+v", jwksURI, err, set)
	}
	return thirdParty{issuer: issuer, keys: set}
}

// rfc9068 is the claims RFC 9068 section 2.2 requires besides the
// registered ones.
type rfc9068 struct {
	ClientID string `json:"client_id"`
}

func (v thirdParty) verify(raw, audience string, e *authtest.Env, checkType bool) error {
	tok, err := josejwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return err
	}
	h := tok.Headers[0]
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); checkType && typ != "at+jwt" && typ != "application/at+jwt" {
		return fmt.Errorf("typ %q is not an access token's", typ)
	}
	keys := v.keys.Key(h.KeyID)
	if len(keys) != 1 {
		return fmt.Errorf("no key %q in the JWKS", h.KeyID)
	}
	var std josejwt.Claims
	var more rfc9068
	if err := tok.Claims(keys[0].Key, &std, &more); err != nil {
		return err
	}
	if err := std.Validate(josejwt.Expected{Issuer: v.issuer, AnyAudience: josejwt.Audience{audience}, Time: e.Clock.Now()}); err != nil {
		return err
	}
	if std.Subject == "" || std.ID == "" || std.IssuedAt == nil || std.Expiry == nil || more.ClientID == "" {
		return errors.New("a claim RFC 9068 requires is missing")
	}
	return nil
}

// Access tokens are RFC 9068 JWT access tokens that a standard JOSE
// library verifies from the discovery document alone; refresh tokens fail
// that verifier twice over (their typ, and their audience), and cfgd
// refuses them where an access token is expected.
func TestAccessTokensPassAStandardVerifierAndRefreshTokensDoNot(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	s := e.SignIn(t, authtest.Email("jose"))
	v := discover(t, e)
	const audience = "cfgd" // JWT__AUDIENCE's default

	if err := v.verify(s.Access, audience, e, true); err != nil {
		t.Fatalf("the access token fails a standard verifier: %v", err)
	}
	if err := v.verify(s.Refresh, audience, e, true); err == nil {
		t.Fatal("a refresh token passed a standard verifier of access tokens")
	}
	// Even a verifier that forgets the typ check refuses it: its audience
	// is not the access tokens'.
	if err := v.verify(s.Refresh, audience, e, false); !errors.Is(err, josejwt.ErrInvalidAudience) {
		t.Fatalf("a refresh token without the typ check: %v, want an audience refusal", err)
	}
	if r := e.Do(t, http.MethodGet, profilePath, nil, authtest.Bearer(s.Refresh)...); r.Status != http.StatusUnauthorized {
		t.Fatalf("a refresh token as a Bearer: %d %s", r.Status, r.Raw)
	}
	// A refreshed access token is one too.
	r := e.Do(t, http.MethodPost, refreshPath, map[string]string{"refresh": s.Refresh})
	if r.Status != http.StatusOK {
		t.Fatalf("refresh: %d %s", r.Status, r.Raw)
	}
	if err := v.verify(r.Str("access"), audience, e, true); err != nil {
		t.Fatalf("a refreshed access token fails a standard verifier: %v", err)
	}
}

// The discovery document names the issuer the tokens carry and the JWKS
// at an absolute URL on the host the caller used.
func TestDiscoveryDocument(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	r := e.Do(t, http.MethodGet, "/.well-known/openid-configuration", nil)
	if r.Status != http.StatusOK || r.Str("issuer") != "cfgd" || r.Str("jwks_uri") != e.URL+"/.well-known/jwks.json" ||
		r.Str("token_endpoint") != e.URL+refreshPath || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("discovery: %d %s", r.Status, r.Raw)
	}
	if r := e.Do(t, http.MethodPost, "/.well-known/openid-configuration", nil); r.Status != http.StatusMethodNotAllowed {
		t.Fatalf("POST discovery: %d", r.Status)
	}
}
