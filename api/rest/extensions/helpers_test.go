package extensions

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/deploy/errcode"
)

// Secret values used throughout the tests; none may ever be seen outside.
const (
	cryptoKey     = "ck_live_7f3a9b21e4d0c5"
	webhookSecret = "whsec_Q8zL2mN4pR6tV0xY"
	botToken      = "123456789:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0"
)

var secrets = []string{cryptoKey, webhookSecret, botToken}

// allOn is an environment with the four built-in extensions on and every
// required value given.
func allOn() map[string]string {
	return map[string]string{
		"EXTENSIONS__ENABLED":                      "payments,leads,support,newsletter",
		"PAYMENTS_API_KEYS__CRYPTO_API_KEY":        cryptoKey,
		"PAYMENTS_API_KEYS__CRYPTO_WEBHOOK_SECRET": webhookSecret,
		"TELEGRAM__BOT_TOKEN":                      botToken,
		"LEADS__NOTIFICATION_EMAIL":                "leads@example.com",
		"NEWSLETTER__FROM_EMAIL":                   "news@example.com",
		"NEWSLETTER__FROM_NAME":                    "Acme News",
	}
}

// with returns a copy of base with the given NAME=value pairs set; a value
// of "-" removes the variable.
func with(base map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(base)+len(kv)/2)
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "-" {
			delete(out, kv[i])
			continue
		}
		out[kv[i]] = kv[i+1]
	}
	return out
}

// load runs Load and returns the Set with the problems left in the reader.
func load(t testing.TB, env, dotenv map[string]string, installed []Extension) (*Set, error) {
	t.Helper()
	r := config.NewReader(config.FromMaps(env, dotenv))
	s, err := Load(r, installed)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return s, r.Err()
}

// mustLoad is load for settings that must be fine.
func mustLoad(t testing.TB, env map[string]string, installed []Extension) *Set {
	t.Helper()
	s, err := load(t, env, nil, installed)
	if err != nil {
		t.Fatalf("settings problems: %v", err)
	}
	return s
}

// staffHeader is how the fake staff middleware is told who is calling.
const staffHeader = "X-Test-User"

// fakeStaff stands in for the real staff authentication: no user is 401,
// a user who is not staff is 403.
func fakeStaff(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get(staffHeader) {
		case "":
			rest.JSON(w, http.StatusUnauthorized, rest.ErrorBody{Error: "sign in first", Code: "unauthenticated"})
		case "staff":
			next.ServeHTTP(w, r)
		default:
			rest.WriteError(w, errcode.New(errcode.Forbidden, "staff only"))
		}
	})
}

// jsonNotFound is what the caller's router is expected to set.
func jsonNotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rest.JSON(w, http.StatusNotFound, rest.ErrorBody{Error: "no such page", Code: "caller_not_found"})
	})
}

// newRouter mounts s on a router that has the caller's JSON 404.
func newRouter(t testing.TB, s *Set, registry map[string]mux.MiddlewareFunc) *mux.Router {
	t.Helper()
	router := mux.NewRouter()
	router.NotFoundHandler = jsonNotFound()
	if err := s.Mount(router, registry, fakeStaff); err != nil {
		t.Fatalf("Mount: %v", err)
	}
	return router
}

func do(h http.Handler, method, path string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// decode parses a JSON object body.
func decode(t testing.TB, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q, body %s", ct, rec.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, rec.Body)
	}
	return m
}

// assertError checks the JSON error shape of docs/api.md#errors.
func assertError(t testing.TB, rec *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d: %s", rec.Code, status, rec.Body)
	}
	m := decode(t, rec)
	if m["success"] != false || m["code"] != code || m["error"] == "" {
		t.Fatalf("error body %v, want success=false code=%s", m, code)
	}
}

// assertNoSecret fails when any test secret, or a long piece of one, shows up
// in text.
func assertNoSecret(t testing.TB, where, text string) {
	t.Helper()
	for _, s := range secrets {
		for _, piece := range []string{s, s[:8], s[len(s)-8:]} {
			if strings.Contains(text, piece) {
				t.Fatalf("%s holds (part of) a secret %q:\n%s", where, piece, text)
			}
		}
	}
}

// echo answers with the group it belongs to, so tests see which route served.
func echo(group string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest.JSON(w, http.StatusOK, map[string]any{"group": group, "vars": mux.Vars(r)})
	})
}

// demo is an app extension with a route in every kind of group.
func demo() Extension {
	return Extension{
		Name:    "demo",
		Version: "0.1.0",
		Kind:    App,
		Navigation: &Navigation{Title: "Demo", Items: []NavItem{
			{Title: "Reports", URL: "reports/"},
		}},
		ConstanceFields: []ConstanceField{{Name: "DEMO_LIMIT", Default: 10, Help: "items per page"}},
		Schedules:       []Schedule{{Name: "nightly", Cron: "0 3 * * *", Task: "demo.cleanup"}},
		Settings: func(v Vars) any {
			return struct {
				Colour string `json:"colour"`
			}{v.String("DEMO__COLOUR", "blue", "demo colour")}
		},
		Routes: func(any) []Group {
			return []Group{
				{Name: MainGroup, Routes: []Route{
					{Name: "ping", Path: "ping/", Methods: []string{http.MethodGet}, Handler: echo("main")},
					{Name: "item", Path: "items/{id:[0-9]+}/", Handler: echo("main")},
				}},
				{Name: AdminGroup, Routes: []Route{{Name: "ping", Path: "ping/", Handler: echo("admin")}}},
				{Name: SystemGroup, Routes: []Route{{Name: "ping", Path: "ping/", Handler: echo("system")}}},
				{Name: "reports", Routes: []Route{
					{Name: "index", Path: "", Handler: echo("reports")},
					{Name: "ping", Path: "ping/", Handler: echo("reports")},
				}},
			}
		},
	}
}

// cache is a module extension.
func cache() Extension {
	return Extension{
		Name:    "cache",
		Version: "2.0.0",
		Kind:    Module,
		Settings: func(v Vars) any {
			return struct {
				Size int `json:"size"`
			}{v.IntRange("CACHE__SIZE", 100, 1, 1000, "cache size")}
		},
	}
}

func plus(exts ...Extension) []Extension { return append(Builtin(), exts...) }
