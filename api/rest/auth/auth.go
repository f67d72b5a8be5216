// Package auth serves passwordless sign-in over HTTP: OTP request and
// verify, token refresh, logout, the admin password login, the JWKS, and
// the middleware other packages protect their endpoints with (RequireUser
// for a Bearer access token, Staff for admin endpoints).
//
// Every endpoint decodes and checks its input, runs one command from
// commands/otp or commands/session (writes) or a query of
// readmodels/identity (reads), and maps each outcome to a status and the
// error body of api/rest.
package auth

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/cfgd/cfgd/commands/app/signin"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/events"
)

// Paths served by Mount.
const (
	PathOTPRequest = "/api/auth/otp/request/"
	PathOTPVerify  = "/api/auth/otp/verify/"
	PathRefresh    = "/api/auth/token/refresh/"
	PathLogout     = "/api/auth/logout/"
	PathLogin      = "/api/auth/login/"
	PathJWKS       = "/.well-known/jwks.json"
	// PathDiscovery is the OpenID-style discovery document beside the
	// JWKS: issuer and jwks_uri, what a verifier of access tokens needs.
	PathDiscovery = "/.well-known/openid-configuration"
)

// Cookie names of an admin session. csrftoken is readable by scripts, which
// echo it in X-CSRFToken; the session cookie is not.
const (
	SessionCookie = "cfgd_session"
	CSRFCookie    = "csrftoken"
	CSRFHeader    = "X-CSRFToken"
)

// Config is what the HTTP side of sign-in needs besides the core's.
type Config struct {
	// CookieSecure marks the admin cookies Secure (HTTPS only).
	CookieSecure bool
	// TrustedProxies may set X-Forwarded-For.
	TrustedProxies []netip.Prefix
}

// API serves the sign-in capability (signin.App) over HTTP.
type API struct {
	app     *signin.App
	cfg     Config
	csrfKey []byte
}

// New returns the HTTP side of app.
func New(app *signin.App, cfg Config) *API {
	return &API{app: app, cfg: cfg, csrfKey: app.DeriveKey("cfgd csrf v1")}
}

// App is the core the API serves.
func (a *API) App() *signin.App { return a.app }

// Mount adds the sign-in endpoints to r.
func (a *API) Mount(r *mux.Router) {
	r.HandleFunc(PathOTPRequest, a.handleOTPRequest).Methods(http.MethodPost).Name("auth:otp-request")
	r.HandleFunc(PathOTPVerify, a.handleOTPVerify).Methods(http.MethodPost).Name("auth:otp-verify")
	r.HandleFunc(PathRefresh, a.handleRefresh).Methods(http.MethodPost).Name("auth:token-refresh")
	r.HandleFunc(PathLogout, a.handleLogout).Methods(http.MethodPost).Name("auth:logout")
	r.HandleFunc(PathLogin, a.handleLogin).Methods(http.MethodPost).Name("auth:login")
	r.HandleFunc(PathJWKS, a.handleJWKS).Methods(http.MethodGet, http.MethodHead).Name("auth:jwks")
	r.HandleFunc(PathDiscovery, a.handleDiscovery).Methods(http.MethodGet, http.MethodHead).Name("auth:discovery")
}

// Discovery is the document at PathDiscovery.
type Discovery struct {
	// Issuer is exactly the iss of cfgd's tokens (JWT__ISSUER).
	Issuer        string   `json:"issuer"`
	JWKSURI       string   `json:"jwks_uri"`
	TokenEndpoint string   `json:"token_endpoint"`
	Algorithms    []string `json:"access_token_signing_alg_values_supported"`
}

func (a *API) handleDiscovery(w http.ResponseWriter, r *http.Request) {
	base := a.publicBase(r)
	w.Header().Set("Cache-Control", "public, max-age=300")
	rest.JSON(w, http.StatusOK, Discovery{
		Issuer: a.app.Tokens.Issuer(), JWKSURI: base + PathJWKS, TokenEndpoint: base + PathRefresh,
		Algorithms: []string{a.app.Tokens.Algorithm()},
	})
}

// publicBase is the scheme and host the caller reached cfgd at: the issuer
// when it is an http(s) URL, else the request's host, over https when the
// request came over TLS or a trusted proxy says so (X-Forwarded-Proto).
func (a *API) publicBase(r *http.Request) string {
	if u, err := url.Parse(a.app.Tokens.Issuer()); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
		return strings.TrimSuffix(u.String(), "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	} else if peer, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && isTrusted(peer.Addr().Unmap(), a.cfg.TrustedProxies) &&
		strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (a *API) handleJWKS(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(a.app.Tokens.JWKS())
}

// meta is the event metadata of a request.
func meta(r *http.Request, actor string) events.Metadata {
	return events.Metadata{CorrelationID: rest.RequestID(r.Context()), Actor: actor}
}
