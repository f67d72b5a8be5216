package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/session"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/identity"
)

type loginBody struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

type loginUser struct {
	ID          int64  `json:"id"`
	Email       string `json:"email"`
	FirstName   string `json:"first_name"`
	LastName    string `json:"last_name"`
	IsStaff     bool   `json:"is_staff"`
	IsSuperuser bool   `json:"is_superuser"`
}

type loginResponse struct {
	Success   bool      `json:"success"`
	User      loginUser `json:"user"`
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// handleLogin: POST /api/auth/login/ → session.Login, under the failed
// password limits (only wrong passwords count). It sets the HttpOnly
// session cookie and the CSRF cookie.
func (a *API) handleLogin(w http.ResponseWriter, r *http.Request) {
	// Every answer, not only the 200: none may be cached next to a token.
	rest.NoStore(w)
	var body loginBody
	if !rest.DecodeOr400(w, r, &body) {
		return
	}
	fields := map[string]string{}
	if strings.TrimSpace(body.Email) == "" {
		fields["email"] = identity.ErrEmailRequired.Error()
	} else if _, err := identity.NormaliseEmail(body.Email); errors.Is(err, identity.ErrHiddenCharacter) || errors.Is(err, identity.ErrMixedScript) {
		// A look-alike of an address is refused for what it is, like the
		// OTP endpoints do, rather than answered as wrong credentials.
		fields["email"] = err.Error()
	}
	if body.Password == "" {
		fields["password"] = "this field is required"
	}
	if len(body.Password) > 1024 {
		fields["password"] = "is too long"
	}
	if len(fields) > 0 {
		rest.WriteError(w, errcode.Fields(fields))
		return
	}
	var res session.LoginResult
	err := a.app.Auth.GuardPassword(r.Context(), body.Email, clientIP(r, a.cfg.TrustedProxies), func() (bool, error) {
		var err error
		res, err = a.app.Login.Handle(r.Context(), session.Login{Email: body.Email, Password: body.Password, Meta: meta(r, "")})
		return errors.Is(err, session.ErrBadCredentials), err
	})
	var throttled *signin.ThrottledError
	switch {
	case err == nil:
		a.setSessionCookies(w, res.Token.Token, res.SessionID, res.Token.Claims.ExpiresAt.Time)
		u := res.User
		rest.JSON(w, http.StatusOK, loginResponse{
			Success: true, CSRFToken: a.csrfToken(res.SessionID), ExpiresAt: res.Token.Claims.ExpiresAt.Time.UTC(),
			User: loginUser{ID: u.ID, Email: u.Email, FirstName: u.FirstName, LastName: u.LastName, IsStaff: u.IsStaff, IsSuperuser: u.IsSuperuser},
		})
	case errors.As(err, &throttled):
		rest.WriteError(w, errcode.RetryLater("Too many failed sign-in attempts", throttled.RetryAfter))
	case errors.Is(err, session.ErrBadCredentials):
		w.Header().Set("WWW-Authenticate", `Basic realm="cfgd"`)
		rest.WriteError(w, errcode.New(errcode.InvalidCredentials, "Invalid e-mail or password"))
	case errors.Is(err, session.ErrNotStaff):
		rest.WriteError(w, errcode.New(errcode.Forbidden, "This account may not use the administration"))
	default:
		rest.Fail(w, r, err)
	}
}

func (a *API) setSessionCookies(w http.ResponseWriter, raw, sid string, exp time.Time) {
	maxAge := int(exp.Sub(a.app.Now()).Round(time.Second).Seconds())
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: raw, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: a.cfg.CookieSecure, SameSite: http.SameSiteLaxMode,
	})
	http.SetCookie(w, &http.Cookie{
		Name: CSRFCookie, Value: a.csrfToken(sid), Path: "/", MaxAge: maxAge,
		Secure: a.cfg.CookieSecure, SameSite: http.SameSiteLaxMode,
	})
}

func (a *API) clearCookies(w http.ResponseWriter) {
	for _, name := range []string{SessionCookie, CSRFCookie} {
		http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: name == SessionCookie,
			Secure: a.cfg.CookieSecure, SameSite: http.SameSiteLaxMode})
	}
}

// csrfToken is bound to the session: an attacker who can plant cookies
// still cannot make one that matches.
func (a *API) csrfToken(sid string) string {
	m := hmac.New(sha256.New, a.csrfKey)
	m.Write([]byte(sid))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfOK checks X-CSRFToken against the CSRF cookie and the session.
func (a *API) csrfOK(r *http.Request, sid string) bool {
	header := r.Header.Get(CSRFHeader)
	c, err := r.Cookie(CSRFCookie)
	if header == "" || err != nil {
		return false
	}
	want := []byte(a.csrfToken(sid))
	return hmac.Equal([]byte(header), []byte(c.Value)) && hmac.Equal([]byte(header), want)
}

// safeMethod tells whether a method cannot change state (RFC 9110 9.2.1).
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions || m == http.MethodTrace
}
