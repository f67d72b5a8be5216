package auth

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/deploy/errcode"
)

// Principal is who made a request (signin.Principal).
type Principal = signin.Principal

// Authentication methods, as signin names them.
const (
	ViaBearer  = signin.ViaBearer
	ViaBasic   = signin.ViaBasic
	ViaSession = signin.ViaSession
	ViaAPIKey  = signin.ViaAPIKey
)

// APIKeyHeader carries an API key, on HTTP as in gRPC metadata.
const APIKeyHeader = "X-API-Key"

type principalKey struct{}

// PrincipalFrom returns the principal RequireUser, Staff or StaffOrAPIKey
// put in ctx.
func PrincipalFrom(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	return p, ok
}

func withPrincipal(r *http.Request, p *Principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

var errCSRF = errors.New("CSRF check failed: send the csrftoken cookie's value in the X-CSRFToken header")

// answer maps an authenticator outcome to its HTTP answer.
func (a *API) answer(w http.ResponseWriter, r *http.Request, err error) {
	var throttled *signin.ThrottledError
	switch {
	case errors.Is(err, signin.ErrNoCredentials):
		w.Header().Set("WWW-Authenticate", `Bearer realm="cfgd", Basic realm="cfgd"`)
		rest.WriteError(w, errcode.New(errcode.NotAuthenticated, "Authentication credentials were not provided"))
	case errors.Is(err, signin.ErrInvalidToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="cfgd", Basic realm="cfgd"`)
		rest.WriteError(w, errcode.New(errcode.TokenNotValid, "Token is invalid or expired"))
	case errors.Is(err, signin.ErrBadPassword):
		w.Header().Set("WWW-Authenticate", `Bearer realm="cfgd", Basic realm="cfgd"`)
		rest.WriteError(w, errcode.New(errcode.AuthenticationFailed, "Invalid e-mail or password"))
	case errors.Is(err, signin.ErrInvalidAPIKey):
		w.Header().Set("WWW-Authenticate", `APIKey realm="cfgd"`)
		rest.WriteError(w, errcode.New(errcode.InvalidAPIKey, "API key is invalid, revoked or expired"))
	case errors.Is(err, signin.ErrNotStaff):
		rest.WriteError(w, errcode.New(errcode.Forbidden, "You do not have permission to perform this action"))
	case errors.Is(err, errCSRF):
		rest.WriteError(w, errcode.New(errcode.CSRFFailed, errCSRF.Error()))
	case errors.As(err, &throttled):
		rest.WriteError(w, errcode.RetryLater("Too many failed sign-in attempts", throttled.RetryAfter))
	default:
		rest.Fail(w, r, err)
	}
}

// RequireUser lets through requests with a valid, unrevoked Bearer access
// token; the principal carries the user id, not the user.
func (a *API) RequireUser() mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, cred := splitAuthorization(r)
			if !strings.EqualFold(scheme, "Bearer") || cred == "" {
				a.answer(w, r, signin.ErrNoCredentials)
				return
			}
			p, err := a.app.Auth.Bearer(r.Context(), cred)
			if err != nil {
				a.answer(w, r, err)
				return
			}
			next.ServeHTTP(w, withPrincipal(r, p))
		})
	}
}

// Staff lets through active staff users authenticated by a Bearer access
// token, HTTP Basic (e-mail and password) or the admin session cookie. It
// answers 401 without (valid) credentials and 403 for anyone else; a
// state-changing request under the session cookie must carry X-CSRFToken
// equal to the csrftoken cookie. An API key alone (X-API-Key) is never
// staff: 403 when valid. Wrap every admin endpoint in it.
func (a *API) Staff() mux.MiddlewareFunc {
	return a.staff(false)
}

// StaffOrAPIKey is Staff that also lets through any valid API key (sent in
// X-API-Key), for read-only endpoints machines call.
func (a *API) StaffOrAPIKey() mux.MiddlewareFunc {
	return a.staff(true)
}

func (a *API) staff(keys bool) mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := a.authenticateStaff(r, keys)
			if err != nil {
				a.answer(w, r, err)
				return
			}
			next.ServeHTTP(w, withPrincipal(r, p))
		})
	}
}

func (a *API) authenticateStaff(r *http.Request, keys bool) (*Principal, error) {
	ctx := r.Context()
	auth := a.app.Auth
	raw := r.Header.Get(APIKeyHeader)
	if keys && raw != "" {
		return auth.APIKey(ctx, raw)
	}
	var p *Principal
	var err error
	scheme, cred := splitAuthorization(r)
	switch {
	case raw != "" && scheme == "":
		// A key is a machine credential, never staff: a valid one is
		// forbidden here (403, as gRPC's PermissionDenied), a wrong one
		// is not authenticated (401).
		if _, err := auth.APIKey(ctx, raw); err != nil {
			return nil, err
		}
		return nil, signin.ErrNotStaff
	case strings.EqualFold(scheme, "Bearer") && cred != "":
		p, err = auth.Bearer(ctx, cred)
	case strings.EqualFold(scheme, "Basic"):
		email, password, ok := r.BasicAuth()
		if !ok {
			return nil, signin.ErrBadPassword
		}
		p, err = auth.Password(ctx, email, password, clientIP(r, a.cfg.TrustedProxies))
	case scheme != "":
		return nil, signin.ErrInvalidToken
	default:
		c, cerr := r.Cookie(SessionCookie)
		if cerr != nil || c.Value == "" {
			return nil, signin.ErrNoCredentials
		}
		if p, err = auth.Session(ctx, c.Value); err == nil && !safeMethod(r.Method) && !a.csrfOK(r, p.SessionID) {
			return nil, errCSRF
		}
	}
	if err != nil {
		return nil, err
	}
	if err := auth.RequireStaff(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

func splitAuthorization(r *http.Request) (scheme, cred string) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if h == "" {
		return "", ""
	}
	scheme, cred, _ = strings.Cut(h, " ")
	return scheme, strings.TrimSpace(cred)
}
