package auth

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/session"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/deploy/errcode"
)

type refreshBody struct {
	Refresh string `json:"refresh"`
}

type refreshResponse struct {
	Access  string `json:"access"`
	Refresh string `json:"refresh,omitempty"`
}

func tokenInvalid(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="cfgd", error="invalid_token"`)
	rest.WriteError(w, errcode.New(errcode.TokenNotValid, "Token is invalid or expired"))
}

// handleRefresh: POST /api/auth/token/refresh/ → session.Refresh.
func (a *API) handleRefresh(w http.ResponseWriter, r *http.Request) {
	// Every answer, not only the 200: none may be cached next to a token.
	rest.NoStore(w)
	body, ok := decodeRefresh(w, r)
	if !ok {
		return
	}
	res, err := a.app.Refresh.Handle(r.Context(), session.Refresh{Token: body.Refresh, Meta: meta(r, "")})
	switch {
	case err == nil:
		out := refreshResponse{Access: res.Access.Token}
		if res.Refresh != nil {
			out.Refresh = res.Refresh.Token
		}
		rest.JSON(w, http.StatusOK, out)
	case errors.Is(err, session.ErrInvalidToken):
		if errors.Is(err, session.ErrReused) {
			a.app.Log.WarnContext(r.Context(), "rotated refresh token reused; session revoked", "request_id", rest.RequestID(r.Context()))
		}
		tokenInvalid(w)
	default:
		rest.Fail(w, r, err)
	}
}

type logoutResponse struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
}

// handleLogout: POST /api/auth/logout/ → session.Logout. An API session is
// named by its refresh token in the body; an admin session by its cookie
// (with the CSRF header) when the body is empty.
func (a *API) handleLogout(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
			a.logoutWeb(w, r, c.Value)
			return
		}
	}
	body, ok := decodeRefresh(w, r)
	if !ok {
		return
	}
	a.answerLogout(w, r, a.app.EndSession(r.Context(), body.Refresh, meta(r, "")))
}

func (a *API) logoutWeb(w http.ResponseWriter, r *http.Request, raw string) {
	claims, err := a.app.Tokens.Parse(raw, token.Web)
	if err != nil {
		a.clearCookies(w)
		tokenInvalid(w)
		return
	}
	if !a.csrfOK(r, claims.SessionID) {
		rest.WriteError(w, errcode.New(errcode.CSRFFailed, "CSRF check failed: send the csrftoken cookie's value in the X-CSRFToken header"))
		return
	}
	a.clearCookies(w)
	a.answerLogout(w, r, a.app.EndSessionOf(r.Context(), claims, meta(r, "user:"+strconv.FormatInt(claims.UserID(), 10))))
}

func (a *API) answerLogout(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case err == nil:
		rest.JSON(w, http.StatusOK, logoutResponse{Success: true, Message: "Logged out"})
	case errors.Is(err, signin.ErrInvalidToken):
		tokenInvalid(w)
	default:
		rest.Fail(w, r, err)
	}
}

// decodeRefresh reads the {"refresh": ...} body that refresh and logout share.
func decodeRefresh(w http.ResponseWriter, r *http.Request) (refreshBody, bool) {
	var body refreshBody
	if !rest.DecodeOr400(w, r, &body) {
		return body, false
	}
	if body.Refresh == "" {
		rest.WriteError(w, errcode.Fields(map[string]string{"refresh": "this field is required"}))
		return body, false
	}
	return body, true
}
