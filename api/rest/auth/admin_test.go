package auth_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/commands/app/signin"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
)

const loginPath = "/api/auth/login/"

// staffEnv serves /probe/ (any method) behind the staff middleware; the
// probe answers who got through.
func staffEnv(t *testing.T, o authtest.Options) *authtest.Env {
	e := authtest.Start(t, o)
	return e.WithRoutes(t, func(r *mux.Router) {
		r.Handle("/probe/", e.API.Staff()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, _ := auth.PrincipalFrom(r.Context())
			rest.JSON(w, http.StatusOK, map[string]any{"user_id": p.UserID, "via": p.Via, "email": p.User.Email})
		})))
	})
}

func cookies(r authtest.Response) map[string]*http.Cookie {
	out := map[string]*http.Cookie{}
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		out[c.Name] = c
	}
	return out
}

func basic(email, password string) []string {
	return []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(email+":"+password))}
}

func TestAdminSessionLoginAndCSRF(t *testing.T) {
	t.Parallel()
	e := staffEnv(t, authtest.Options{})
	admin := authtest.Email("admin")
	e.Superuser(t, admin, "correct horse battery")

	r := e.Do(t, http.MethodPost, loginPath, map[string]string{"email": strings.ToUpper(admin), "password": "correct horse battery"})
	if r.Status != http.StatusOK || r.Obj("user")["is_staff"] != true || r.Str("csrf_token") == "" {
		t.Fatalf("login: %d %s", r.Status, r.Raw)
	}
	c := cookies(r)
	sess, csrf := c[auth.SessionCookie], c[auth.CSRFCookie]
	if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteLaxMode || sess.Path != "/" || sess.MaxAge <= 0 {
		t.Fatalf("session cookie: %+v", sess)
	}
	if csrf == nil || csrf.HttpOnly || csrf.Value != r.Str("csrf_token") {
		t.Fatalf("csrf cookie: %+v", csrf)
	}
	cookieHdr := auth.SessionCookie + "=" + sess.Value + "; " + auth.CSRFCookie + "=" + csrf.Value

	if r := e.Do(t, http.MethodGet, "/probe/", nil, "Cookie", cookieHdr); r.Status != http.StatusOK || r.Str("via") != "session" {
		t.Fatalf("GET under the session: %d %s", r.Status, r.Raw)
	}
	// A state-changing request needs the CSRF header, matching the cookie
	// and the session.
	for name, hdr := range map[string][]string{
		"no header":             {"Cookie", cookieHdr},
		"wrong header":          {"Cookie", cookieHdr, auth.CSRFHeader, "forged"},
		"header without cookie": {"Cookie", auth.SessionCookie + "=" + sess.Value, auth.CSRFHeader, csrf.Value},
		"planted cookie pair":   {"Cookie", auth.SessionCookie + "=" + sess.Value + "; " + auth.CSRFCookie + "=abc", auth.CSRFHeader, "abc"},
	} {
		r := e.Do(t, http.MethodPost, "/probe/", `{}`, hdr...)
		if r.Status != http.StatusForbidden || r.Str("code") != "csrf_failed" {
			t.Fatalf("POST with %s: %d %s", name, r.Status, r.Raw)
		}
	}
	if r := e.Do(t, http.MethodPost, "/probe/", `{}`, "Cookie", cookieHdr, auth.CSRFHeader, csrf.Value); r.Status != http.StatusOK {
		t.Fatalf("POST with the CSRF header: %d %s", r.Status, r.Raw)
	}
	// Bearer requests need no CSRF header: no ambient credential.
	s := e.SignIn(t, admin)
	if r := e.Do(t, http.MethodPost, "/probe/", `{}`, authtest.Bearer(s.Access)...); r.Status != http.StatusOK || r.Str("via") != "bearer" {
		t.Fatalf("POST with a staff Bearer token: %d %s", r.Status, r.Raw)
	}

	// Logging out by cookie needs the CSRF header too, then ends the session.
	if r := e.Do(t, http.MethodPost, logoutPath, nil, "Cookie", cookieHdr); r.Status != http.StatusForbidden {
		t.Fatalf("cookie logout without CSRF: %d %s", r.Status, r.Raw)
	}
	r = e.Do(t, http.MethodPost, logoutPath, nil, "Cookie", cookieHdr, auth.CSRFHeader, csrf.Value)
	if r.Status != http.StatusOK || cookies(r)[auth.SessionCookie] == nil || cookies(r)[auth.SessionCookie].MaxAge >= 0 {
		t.Fatalf("cookie logout: %d %s %v", r.Status, r.Raw, r.Header["Set-Cookie"])
	}
	wantUnauthorized(t, e.Do(t, http.MethodGet, "/probe/", nil, "Cookie", cookieHdr), "session after logout")
}

func TestStaffMiddleware(t *testing.T) {
	t.Parallel()
	e := staffEnv(t, authtest.Options{})
	admin := authtest.Email("staff")
	e.Superuser(t, admin, "s3cret-passw0rd")
	plain := e.SignIn(t, authtest.Email("plain")) // an ordinary OTP user
	staff := e.SignIn(t, admin)                   // the superuser can also sign in by OTP

	tests := []struct {
		name   string
		hdr    []string
		status int
		via    string
	}{
		{"no credentials", nil, http.StatusUnauthorized, ""},
		{"staff bearer", authtest.Bearer(staff.Access), http.StatusOK, auth.ViaBearer},
		{"non-staff bearer", authtest.Bearer(plain.Access), http.StatusForbidden, ""},
		{"refresh token as bearer", authtest.Bearer(staff.Refresh), http.StatusUnauthorized, ""},
		{"garbage bearer", authtest.Bearer("x.y.z"), http.StatusUnauthorized, ""},
		{"basic", basic(admin, "s3cret-passw0rd"), http.StatusOK, auth.ViaBasic},
		{"basic, upper-case address", basic(strings.ToUpper(admin), "s3cret-passw0rd"), http.StatusOK, auth.ViaBasic},
		{"basic, wrong password", basic(admin, "wrong"), http.StatusUnauthorized, ""},
		{"basic, unknown user", basic(authtest.Email("ghost"), "s3cret-passw0rd"), http.StatusUnauthorized, ""},
		{"basic, user without password", basic("plain@example.com", ""), http.StatusUnauthorized, ""},
		{"unknown scheme", []string{"Authorization", "Digest abc"}, http.StatusUnauthorized, ""},
		{"forged session cookie", []string{"Cookie", auth.SessionCookie + "=" + staff.Access}, http.StatusUnauthorized, ""},
	}
	for _, tc := range tests {
		r := e.Do(t, http.MethodGet, "/probe/", nil, tc.hdr...)
		if r.Status != tc.status || (tc.via != "" && r.Str("via") != tc.via) {
			t.Errorf("%s: %d %s", tc.name, r.Status, r.Raw)
		}
		if tc.status == http.StatusUnauthorized && r.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		}
	}
	// The analytics endpoints use the same middleware.
	if r := e.Do(t, http.MethodGet, "/api/analytics/sources/top/", nil, authtest.Bearer(plain.Access)...); r.Status != http.StatusForbidden {
		t.Errorf("analytics as non-staff: %d", r.Status)
	}
	if r := e.Do(t, http.MethodGet, "/api/analytics/sources/top/", nil); r.Status != http.StatusUnauthorized {
		t.Errorf("analytics without credentials: %d", r.Status)
	}
}

func TestLoginFailures(t *testing.T) {
	t.Parallel()
	e := staffEnv(t, authtest.Options{Config: func(c *signin.Config) { c.LoginFailures, c.LoginWindow = 3, 15*time.Minute }})
	admin := authtest.Email("throttle")
	e.Superuser(t, admin, "right-password")

	bad := e.Do(t, http.MethodPost, loginPath, map[string]string{"email": admin, "password": "wrong-1"})
	unknown := e.Do(t, http.MethodPost, loginPath, map[string]string{"email": authtest.Email("unknown"), "password": "wrong-1"})
	if bad.Status != http.StatusUnauthorized || string(bad.Raw) != string(unknown.Raw) {
		t.Fatalf("wrong password %d %s vs unknown address %d %s", bad.Status, bad.Raw, unknown.Status, unknown.Raw)
	}
	// A success in between does not count as a failure.
	if r := e.Do(t, http.MethodPost, loginPath, map[string]string{"email": admin, "password": "right-password"}); r.Status != http.StatusOK {
		t.Fatalf("right password: %d %s", r.Status, r.Raw)
	}
	for i := range 2 {
		if r := e.Do(t, http.MethodPost, loginPath, map[string]string{"email": admin, "password": "wrong"}); r.Status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d %s", i+2, r.Status, r.Raw)
		}
	}
	// Three failures: now even the right password is refused for a while.
	r := e.Do(t, http.MethodPost, loginPath, map[string]string{"email": admin, "password": "right-password"})
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("after 3 failures: %d %s", r.Status, r.Raw)
	}
	// HTTP Basic counts against the same limit.
	if r := e.Do(t, http.MethodGet, "/probe/", nil, basic(admin, "right-password")...); r.Status != http.StatusTooManyRequests {
		t.Fatalf("basic while throttled: %d %s", r.Status, r.Raw)
	}
	// An OTP user has no password: never past 401.
	otpUser := authtest.Email("otp-only")
	e.SignIn(t, otpUser)
	if r := e.Do(t, http.MethodPost, loginPath, map[string]string{"email": otpUser, "password": "anything-at-all"}); r.Status != http.StatusUnauthorized {
		t.Fatalf("user without a password: %d %s", r.Status, r.Raw)
	}
}
