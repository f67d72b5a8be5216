package auth

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/web"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events/identity"
	rm "github.com/cfgd/cfgd/readmodels/identity"
)

// Authentication methods.
const (
	ViaBearer  = "bearer"
	ViaBasic   = "basic"
	ViaSession = "session"
)

// Principal is who made a request.
type Principal struct {
	UserID      int64
	SessionID   string // empty for HTTP Basic
	UserVersion int64  // the user version the credential promises readers
	Via         string
	User        *rm.User // loaded by Staff; nil under RequireUser
}

type principalKey struct{}

// PrincipalFrom returns the principal RequireUser or Staff put in ctx.
func PrincipalFrom(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	return p, ok
}

func withPrincipal(r *http.Request, p *Principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

// authError is an answer the middleware gives instead of calling next.
type authError struct {
	status int
	code   string
	msg    string
	err    error // a failing dependency, for 503
}

var (
	errNoCredentials = &authError{status: http.StatusUnauthorized, code: "not_authenticated", msg: "Authentication credentials were not provided"}
	errBadToken      = &authError{status: http.StatusUnauthorized, code: "token_not_valid", msg: "Token is invalid or expired"}
	errBadPassword   = &authError{status: http.StatusUnauthorized, code: "authentication_failed", msg: "Invalid e-mail or password"}
	errNotStaff      = &authError{status: http.StatusForbidden, code: "forbidden", msg: "You do not have permission to perform this action"}
	errCSRF          = &authError{status: http.StatusForbidden, code: "csrf_failed", msg: "CSRF check failed: send the csrftoken cookie's value in the X-CSRFToken header"}
)

func (a *API) answer(w http.ResponseWriter, r *http.Request, e *authError) {
	switch {
	case e.err != nil:
		Fail(w, r, e.err)
		return
	case e.status == http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="cfgd", Basic realm="cfgd"`)
	}
	web.Error(w, e.status, e.code, e.msg)
}

// RequireUser lets through requests with a valid, unrevoked Bearer access
// token; the principal carries the user id, not the user.
func (a *API) RequireUser() mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, cred := splitAuthorization(r)
			if !strings.EqualFold(scheme, "Bearer") || cred == "" {
				a.answer(w, r, errNoCredentials)
				return
			}
			p, aerr := a.bearer(r.Context(), cred)
			if aerr != nil {
				a.answer(w, r, aerr)
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
// equal to the csrftoken cookie. Wrap every admin endpoint in it.
func (a *API) Staff() mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, aerr := a.authenticateStaff(w, r)
			if aerr != nil {
				a.answer(w, r, aerr)
				return
			}
			if p == nil {
				return // answered (throttled)
			}
			next.ServeHTTP(w, withPrincipal(r, p))
		})
	}
}

func (a *API) authenticateStaff(w http.ResponseWriter, r *http.Request) (*Principal, *authError) {
	ctx := r.Context()
	var p *Principal
	scheme, cred := splitAuthorization(r)
	switch {
	case strings.EqualFold(scheme, "Bearer") && cred != "":
		var aerr *authError
		if p, aerr = a.bearer(ctx, cred); aerr != nil {
			return nil, aerr
		}
	case strings.EqualFold(scheme, "Basic"):
		email, password, ok := r.BasicAuth()
		if !ok || email == "" || password == "" || len(password) > 1024 {
			return nil, errBadPassword
		}
		norm, _ := identity.NormaliseEmail(email)
		undo, ok := a.throttleLogin(w, r, norm)
		if !ok {
			return nil, nil
		}
		u, err := a.users.ByEmail(ctx, norm)
		if err != nil && !errors.Is(err, rm.ErrNotFound) {
			return nil, &authError{err: err}
		}
		// Hash even for an unknown address, so timing does not tell.
		if !user.CheckPassword(u.PasswordHash, password) || u.ID == 0 {
			return nil, errBadPassword
		}
		undo()
		p = &Principal{UserID: u.ID, UserVersion: u.Version, Via: ViaBasic, User: &u}
	case scheme != "":
		return nil, errBadToken
	default:
		c, err := r.Cookie(SessionCookie)
		if err != nil || c.Value == "" {
			return nil, errNoCredentials
		}
		claims, err := a.tokens.Parse(c.Value, token.Web)
		if err != nil {
			return nil, errBadToken
		}
		if revoked, err := a.revocations.Revoked(ctx, claims.SessionID); err != nil {
			return nil, &authError{err: err}
		} else if revoked {
			return nil, errBadToken
		}
		if !safeMethod(r.Method) && !a.csrfOK(r, claims.SessionID) {
			return nil, errCSRF
		}
		p = &Principal{UserID: claims.UserID(), SessionID: claims.SessionID, UserVersion: claims.UserVersion, Via: ViaSession}
	}
	if p.User == nil {
		u, err := a.users.ByID(ctx, p.UserID, p.UserVersion)
		if errors.Is(err, rm.ErrNotFound) {
			return nil, errBadToken
		}
		if err != nil {
			return nil, &authError{err: err}
		}
		p.User = &u
	}
	if !p.User.IsActive || !p.User.IsStaff {
		return nil, errNotStaff
	}
	return p, nil
}

// bearer checks an access token and its session's revocation.
func (a *API) bearer(ctx context.Context, raw string) (*Principal, *authError) {
	claims, err := a.tokens.Parse(raw, token.Access)
	if err != nil {
		return nil, errBadToken
	}
	revoked, err := a.revocations.Revoked(ctx, claims.SessionID)
	if err != nil {
		return nil, &authError{err: err}
	}
	if revoked {
		return nil, errBadToken
	}
	return &Principal{UserID: claims.UserID(), SessionID: claims.SessionID, UserVersion: claims.UserVersion, Via: ViaBearer}, nil
}

func splitAuthorization(r *http.Request) (scheme, cred string) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if h == "" {
		return "", ""
	}
	scheme, cred, _ = strings.Cut(h, " ")
	return scheme, strings.TrimSpace(cred)
}
