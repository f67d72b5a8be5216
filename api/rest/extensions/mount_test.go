package extensions

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/config"
)

func TestMountGroups(t *testing.T) {
	on := map[string]string{"EXTENSIONS__ENABLED": "demo"}
	prefixed := with(on, "DEMO__URL_PREFIX", "d2")
	adminOff := with(on, "DEMO__ADMIN_ENABLED", "false")
	off := map[string]string{"DEMO__URL_PREFIX": "d2"}

	tests := []struct {
		name   string
		env    map[string]string
		method string
		path   string
		status int
		group  string // the group that answers; "" for an error
	}{
		{"main", on, "GET", "/cfg/demo/ping/", 200, "main"},
		{"main with variable", on, "GET", "/cfg/demo/items/42/", 200, "main"},
		{"main variable not matching", on, "GET", "/cfg/demo/items/x/", 404, ""},
		{"admin", on, "GET", "/cfg/demo/admin/ping/", 200, "admin"},
		{"system", on, "GET", "/cfg/demo/system/ping/", 200, "system"},
		{"custom group root", on, "GET", "/cfg/demo/reports/", 200, "reports"},
		{"custom group route", on, "GET", "/cfg/demo/reports/ping/", 200, "reports"},
		{"api root", on, "GET", "/cfg/demo/api/", 200, "api"},
		{"unknown path under extension", on, "GET", "/cfg/demo/nope/", 404, ""},
		{"extension root has no route", on, "GET", "/cfg/demo/", 404, ""},
		{"unmounted group", on, "GET", "/cfg/demo/other/ping/", 404, ""},
		{"prefix not in use", on, "GET", "/cfg/d2/ping/", 404, ""},
		{"wrong method", on, "POST", "/cfg/demo/ping/", 405, ""},
		{"wrong method on api root", on, "DELETE", "/cfg/demo/api/", 405, ""},

		{"prefixed main", prefixed, "GET", "/cfg/d2/ping/", 200, "main"},
		{"prefixed variable", prefixed, "GET", "/cfg/d2/items/7/", 200, "main"},
		{"prefixed admin", prefixed, "GET", "/cfg/d2/admin/ping/", 200, "admin"},
		{"prefixed system", prefixed, "GET", "/cfg/d2/system/ping/", 200, "system"},
		{"prefixed custom", prefixed, "GET", "/cfg/d2/reports/ping/", 200, "reports"},
		{"prefixed api root", prefixed, "GET", "/cfg/d2/api/", 200, "api"},
		{"name replaced by prefix", prefixed, "GET", "/cfg/demo/ping/", 404, ""},
		{"name api root replaced by prefix", prefixed, "GET", "/cfg/demo/api/", 404, ""},

		{"admin off hides admin group", adminOff, "GET", "/cfg/demo/admin/ping/", 404, ""},
		{"admin off keeps system", adminOff, "GET", "/cfg/demo/system/ping/", 200, "system"},
		{"admin off keeps api root", adminOff, "GET", "/cfg/demo/api/", 200, "api"},

		{"disabled main", off, "GET", "/cfg/demo/ping/", 404, ""},
		{"disabled prefixed", off, "GET", "/cfg/d2/ping/", 404, ""},
		{"disabled admin", off, "GET", "/cfg/demo/admin/ping/", 404, ""},
		{"disabled api root", off, "GET", "/cfg/demo/api/", 404, ""},
		{"disabled builtin api root", off, "GET", "/cfg/payments/api/", 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			router := newRouter(t, mustLoad(t, tc.env, plus(demo())), nil)
			rec := do(router, tc.method, tc.path)
			switch {
			case tc.status == 404:
				assertError(t, rec, 404, "caller_not_found")
			case tc.status == 405:
				assertError(t, rec, 405, "method_not_allowed")
			case tc.group == "api":
				if rec.Code != 200 || decode(t, rec)["name"] != "demo" {
					t.Fatalf("api root: %d %s", rec.Code, rec.Body)
				}
			default:
				if rec.Code != tc.status || decode(t, rec)["group"] != tc.group {
					t.Fatalf("got %d %s, want %d from group %s", rec.Code, rec.Body, tc.status, tc.group)
				}
			}
		})
	}
}

func TestRouteNames(t *testing.T) {
	on := map[string]string{"EXTENSIONS__ENABLED": "demo,payments"}
	tests := []struct {
		name  string
		env   map[string]string
		route string
		vars  []string
		want  string // "" when the route must not exist
	}{
		{"main", on, "demo:ping", nil, "/cfg/demo/ping/"},
		{"main with variable", on, "demo:item", []string{"id", "7"}, "/cfg/demo/items/7/"},
		{"admin", on, "demo:admin:ping", nil, "/cfg/demo/admin/ping/"},
		{"system", on, "demo:system:ping", nil, "/cfg/demo/system/ping/"},
		{"custom", on, "demo:reports:index", nil, "/cfg/demo/reports/"},
		{"api root", on, "demo:api-root", nil, "/cfg/demo/api/"},
		{"builtin api root", on, "payments:api-root", nil, "/cfg/payments/api/"},
		{"list", on, "extensions:list", nil, "/cfg/extensions/"},
		{"prefix only", with(on, "DEMO__URL_PREFIX", "d2"), "demo:admin:ping", nil, "/cfg/d2/admin/ping/"},
		{"namespace only", with(on, "DEMO__URL_NAMESPACE", "dm"), "dm:system:ping", nil, "/cfg/demo/system/ping/"},
		{"namespace replaces name", with(on, "DEMO__URL_NAMESPACE", "dm"), "demo:ping", nil, ""},
		{"prefix and namespace", with(on, "DEMO__URL_PREFIX", "d2", "DEMO__URL_NAMESPACE", "dm"), "dm:api-root", nil, "/cfg/d2/api/"},
		{"admin off", with(on, "DEMO__ADMIN_ENABLED", "no"), "demo:admin:ping", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			router := newRouter(t, mustLoad(t, tc.env, plus(demo())), nil)
			route := router.Get(tc.route)
			if tc.want == "" {
				if route != nil {
					t.Fatalf("route %s exists", tc.route)
				}
				return
			}
			if route == nil {
				t.Fatalf("no route %s", tc.route)
			}
			u, err := route.URL(tc.vars...)
			if err != nil || u.Path != tc.want {
				t.Fatalf("got %v %v, want %s", u, err, tc.want)
			}
		})
	}
}

// TestNotFoundFallback checks the 404 under an enabled extension when the
// caller has no NotFoundHandler, and that one set after Mount is honoured.
func TestNotFoundFallback(t *testing.T) {
	router := mux.NewRouter()
	if err := mustLoad(t, map[string]string{"EXTENSIONS__ENABLED": "demo"}, plus(demo())).Mount(router, nil, fakeStaff); err != nil {
		t.Fatal(err)
	}
	assertError(t, do(router, "GET", "/cfg/demo/nope/"), 404, "not_found")
	rec := do(router, "PUT", "/cfg/demo/api/")
	assertError(t, rec, 405, "method_not_allowed")
	if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
		t.Errorf("Allow: %q", got)
	}
	rec = do(router, "POST", ListPath, staffHeader, "staff")
	assertError(t, rec, 405, "method_not_allowed")
	if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
		t.Errorf("Allow: %q", got)
	}
	// Routes the caller adds later must not turn a 405 into a 404.
	router.HandleFunc("/cfg/later/", func(http.ResponseWriter, *http.Request) {})
	assertError(t, do(router, "POST", "/cfg/demo/ping/"), 405, "method_not_allowed")
	assertError(t, do(router, "DELETE", ListPath, staffHeader, "staff"), 405, "method_not_allowed")

	router.NotFoundHandler = jsonNotFound()
	router.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rest.JSON(w, http.StatusMethodNotAllowed, rest.ErrorBody{Error: "no", Code: "caller_method"})
	})
	assertError(t, do(router, "PUT", "/cfg/demo/api/"), 405, "caller_method")
	assertError(t, do(router, "GET", "/cfg/demo/nope/"), 404, "caller_not_found")
	assertError(t, do(router, "GET", "/cfg/payments/api/"), 404, "caller_not_found")
}

func TestMiddlewareOrder(t *testing.T) {
	var (
		mu    sync.Mutex
		trace []string
	)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, s)
	}
	named := func(name string) mux.MiddlewareFunc {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				note(name + ">")
				next.ServeHTTP(w, r)
				note("<" + name)
			})
		}
	}
	registry := map[string]mux.MiddlewareFunc{"a": named("a"), "b": named("b"), "c": named("c")}
	handler := Extension{Name: "traced", Version: "1", Routes: func(any) []Group {
		return []Group{
			{Routes: []Route{{Path: "x/", Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { note("handler") })}}},
			{Name: AdminGroup, Routes: []Route{{Path: "x/", Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { note("handler") })}}},
		}
	}}

	tests := []struct {
		name  string
		list  string
		path  string
		want  []string
		extra []string
	}{
		{"listed order, first outermost", "c,a", "/cfg/traced/x/", []string{"c>", "a>", "handler", "<a", "<c"}, nil},
		{"three", "a, b ,c", "/cfg/traced/x/", []string{"a>", "b>", "c>", "handler", "<c", "<b", "<a"}, nil},
		{"wraps other groups too", "b,a", "/cfg/traced/admin/x/", []string{"b>", "a>", "handler", "<a", "<b"}, nil},
		{"wraps the api root", "b", "/cfg/traced/api/", []string{"b>", "<b"}, nil},
		{"none", "", "/cfg/traced/x/", []string{"handler"}, nil},
		{"not applied to another extension", "a", "/cfg/payments/api/", nil, nil},
		{"not applied to the list", "a", ListPath, nil, []string{staffHeader, "staff"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"EXTENSIONS__ENABLED": "traced,payments", "TRACED__MIDDLEWARE_CLASSES": tc.list}
			router := newRouter(t, mustLoad(t, env, []Extension{handler, Builtin()[0]}), registry)
			mu.Lock()
			trace = nil
			mu.Unlock()
			if rec := do(router, "GET", tc.path, tc.extra...); rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			mu.Lock()
			defer mu.Unlock()
			if !reflect.DeepEqual(trace, tc.want) && (len(trace) != 0 || len(tc.want) != 0) {
				t.Fatalf("got %v, want %v", trace, tc.want)
			}
		})
	}
}

func TestMountErrors(t *testing.T) {
	ok := http.NotFoundHandler()
	app := func(groups ...Group) Extension {
		return Extension{Name: "x", Routes: func(any) []Group { return groups }}
	}
	on := map[string]string{"EXTENSIONS__ENABLED": "x"}
	tests := []struct {
		name     string
		env      map[string]string
		ext      Extension
		registry map[string]mux.MiddlewareFunc
		noStaff  bool
		want     string
	}{
		{"unknown middleware", with(on, "X__MIDDLEWARE_CLASSES", "audit,ghost"), app(),
			map[string]mux.MiddlewareFunc{"audit": func(h http.Handler) http.Handler { return h }}, false,
			`X__MIDDLEWARE_CLASSES: expected middleware names from: audit, got "ghost"`},
		{"middleware with empty registry", with(on, "X__MIDDLEWARE_CLASSES", "audit"), app(), nil, false,
			`X__MIDDLEWARE_CLASSES: expected middleware names from: (none registered), got "audit"`},
		{"no staff middleware", on, app(), nil, true, `needs a router and a staff middleware`},
		{"group named api", on, app(Group{Name: "api", Routes: []Route{{Path: "", Handler: ok}}}), nil, false, `and not api`},
		{"group name with slash", on, app(Group{Name: "a/b"}), nil, false, `one path segment`},
		{"group declared twice", on, app(Group{Name: "admin"}, Group{Name: "admin"}), nil, false, `declared twice`},
		{"absolute route path", on, app(Group{Routes: []Route{{Path: "/x/", Handler: ok}}}), nil, false, `path relative to the group`},
		{"route without handler", on, app(Group{Routes: []Route{{Path: "x/"}}}), nil, false, `needs a handler`},
		{"bad template", on, app(Group{Routes: []Route{{Path: "{id/", Handler: ok}}}), nil, false, `route "{id/"`},
		{"main route hides api root", on, app(Group{Routes: []Route{{Path: "api/", Handler: ok}}}), nil, false, `two routes serve /cfg/x/api/`},
		{"same path and method", on, app(Group{Routes: []Route{
			{Path: "x/", Methods: []string{"GET", "POST"}, Handler: ok},
			{Path: "x/", Methods: []string{"post"}, Handler: ok},
		}}), nil, false, `two routes serve /cfg/x/x/`},
		{"any method overlaps", on, app(Group{Routes: []Route{
			{Path: "x/", Methods: []string{"GET"}, Handler: ok},
			{Path: "x/", Handler: ok},
		}}), nil, false, `two routes serve /cfg/x/x/`},
		{"main path into a group", on, app(
			Group{Routes: []Route{{Path: "admin/x/", Handler: ok}}},
			Group{Name: AdminGroup, Routes: []Route{{Path: "x/", Handler: ok}}},
		), nil, false, `two routes serve /cfg/x/admin/x/`},
		{"route name twice", on, app(Group{Routes: []Route{
			{Name: "n", Path: "a/", Handler: ok},
			{Name: "n", Path: "b/", Handler: ok},
		}}), nil, false, `route name "x:n" used twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustLoad(t, tc.env, []Extension{tc.ext})
			router := mux.NewRouter()
			staff := mux.MiddlewareFunc(fakeStaff)
			if tc.noStaff {
				staff = nil
			}
			err := s.Mount(router, tc.registry, staff)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			routes := 0
			_ = router.Walk(func(*mux.Route, *mux.Router, []*mux.Route) error { routes++; return nil })
			if routes != 0 {
				t.Fatalf("a failed Mount left %d routes behind", routes)
			}
		})
	}

	t.Run("valid variants", func(t *testing.T) {
		s := mustLoad(t, on, []Extension{app(
			Group{Routes: []Route{
				{Path: "x/", Methods: []string{"GET"}, Handler: ok},
				{Path: "x/", Methods: []string{"POST"}, Handler: ok},
			}},
			Group{Name: "api-v2", Routes: []Route{{Path: "", Handler: ok}}},
		)})
		if err := s.Mount(mux.NewRouter(), nil, fakeStaff); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAPIRoots(t *testing.T) {
	emptyBase := map[string]any{
		"admin_enabled": true, "middleware_classes": []any{}, "navigation": nil,
		"constance_fields": []any{}, "schedules": []any{}, "url_prefix": nil, "url_namespace": nil,
	}
	merged := func(m map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	env := with(allOn(), "EXTENSIONS__ENABLED", "payments,leads,support,newsletter,demo",
		"SUPPORT__SLA_HOURS", "48", "NEWSLETTER__URL_PREFIX", "news", "NEWSLETTER__URL_NAMESPACE", "nl",
		"LEADS__MIDDLEWARE_CLASSES", "audit", "LEADS__ADMIN_ENABLED", "false")
	noKeys := with(env, "PAYMENTS_API_KEYS__CRYPTO_API_KEY", "-", "PAYMENTS_API_KEYS__CRYPTO_WEBHOOK_SECRET", " ")
	tests := []struct {
		name     string
		env      map[string]string
		path     string
		ext      string
		version  string
		mount    map[string]any
		settings map[string]any // as staff see them
		hidden   []string       // not shown to anyone else
	}{
		{"payments", env, "/cfg/payments/api/", "payments", PaymentsVersion,
			map[string]any{"path": "/cfg/payments/", "api": "/cfg/payments/api/", "namespace": "payments", "groups": map[string]any{}},
			merged(emptyBase, "crypto_api_key", config.Masked, "crypto_webhook_secret", config.Masked), []string{"crypto_api_key", "crypto_webhook_secret"}},
		{"payments without keys", noKeys, "/cfg/payments/api/", "payments", PaymentsVersion, nil,
			merged(emptyBase, "crypto_api_key", "", "crypto_webhook_secret", ""), []string{"crypto_api_key", "crypto_webhook_secret"}},
		{"leads", env, "/cfg/leads/api/", "leads", LeadsVersion, nil,
			merged(emptyBase, "admin_enabled", false, "middleware_classes", []any{"audit"},
				"telegram_enabled", true, "email_enabled", true, "telegram_bot_token", config.Masked, "notification_email", "leads@example.com"), []string{"telegram_bot_token", "notification_email"}},
		{"support", env, "/cfg/support/api/", "support", SupportVersion, nil,
			merged(emptyBase, "ticket_auto_assign", true, "sla_tracking_enabled", true, "sla_hours", 48.0,
				"live_chat_enabled", false, "knowledge_base_integration", true), nil},
		{"newsletter", env, "/cfg/news/api/", "newsletter", NewsletterVersion,
			map[string]any{"path": "/cfg/news/", "api": "/cfg/news/api/", "namespace": "nl", "groups": map[string]any{}},
			merged(emptyBase, "url_prefix", "news", "url_namespace", "nl",
				"from_email", "news@example.com", "from_name", "Acme News", "double_opt_in", true, "unsubscribe_link_required", true), []string{"from_email"}},
		{"structured base settings", env, "/cfg/demo/api/", "demo", "0.1.0",
			map[string]any{"path": "/cfg/demo/", "api": "/cfg/demo/api/", "namespace": "demo", "groups": map[string]any{
				"admin": "/cfg/demo/admin/", "system": "/cfg/demo/system/", "reports": "/cfg/demo/reports/",
			}},
			merged(emptyBase, "colour", "blue",
				"navigation", map[string]any{"title": "Demo", "items": []any{map[string]any{"title": "Reports", "url": "reports/"}}},
				"constance_fields", []any{map[string]any{"name": "DEMO_LIMIT", "default": 10.0, "help": "items per page"}},
				"schedules", []any{map[string]any{"name": "nightly", "cron": "0 3 * * *", "task": "demo.cleanup"}}), nil},
	}
	registry := map[string]mux.MiddlewareFunc{"audit": func(h http.Handler) http.Handler { return h }}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			router := newRouter(t, mustLoad(t, tc.env, plus(demo())), registry)
			for _, method := range []string{"GET", "HEAD"} {
				rec := do(router, method, tc.path)
				if rec.Code != 200 {
					t.Fatalf("%s: status %d: %s", method, rec.Code, rec.Body)
				}
			}
			public := merged(tc.settings)
			for _, k := range tc.hidden {
				delete(public, k)
			}
			// Anonymous callers and users who are not staff see no secret
			// (not even masked) and no e-mail address; staff see all.
			for caller, want := range map[string]map[string]any{"": public, "alice": public, "staff": tc.settings} {
				rec := do(router, "GET", tc.path, staffHeader, caller)
				assertNoSecret(t, "API root", rec.Body.String())
				body := decode(t, rec)
				if body["name"] != tc.ext || body["version"] != tc.version || body["kind"] != "app" || body["enabled"] != true {
					t.Fatalf("identity: %v", body)
				}
				if tc.mount != nil && !reflect.DeepEqual(body["mount"], tc.mount) {
					t.Errorf("mount: got %v, want %v", body["mount"], tc.mount)
				}
				if !reflect.DeepEqual(body["settings"], want) {
					t.Errorf("settings as %q:\ngot  %v\nwant %v", caller, body["settings"], want)
				}
				if caller != "staff" && strings.Contains(rec.Body.String(), "@") {
					t.Errorf("an e-mail address in the API root as %q: %s", caller, rec.Body)
				}
			}
		})
	}
}

func TestList(t *testing.T) {
	env := with(allOn(), "EXTENSIONS__ENABLED", "payments,support", "CACHE__ENABLED", "false")
	router := newRouter(t, mustLoad(t, env, plus(demo(), cache())), nil)

	tests := []struct {
		name   string
		method string
		user   string
		status int
		code   string
	}{
		{"anonymous", "GET", "", 401, "unauthenticated"},
		{"not staff", "GET", "alice", 403, "forbidden"},
		{"staff", "GET", "staff", 200, ""},
		{"staff head", "HEAD", "staff", 200, ""},
		{"staff post", "POST", "staff", 405, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var header []string
			if tc.user != "" {
				header = []string{staffHeader, tc.user}
			}
			rec := do(router, tc.method, ListPath, header...)
			if tc.code != "" {
				assertError(t, rec, tc.status, tc.code)
			} else if rec.Code != tc.status {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		})
	}

	rec := do(router, "GET", ListPath, staffHeader, "staff")
	assertNoSecret(t, "list", rec.Body.String())
	var body struct {
		Count      int
		Extensions []struct {
			Name     string
			Kind     string
			Enabled  bool
			Mount    *struct{ Path string }
			Settings map[string]any
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	type row struct {
		name, kind string
		enabled    bool
		path       string
		settings   bool
	}
	var got []row
	for _, e := range body.Extensions {
		r := row{e.Name, e.Kind, e.Enabled, "", e.Settings != nil}
		if e.Mount != nil {
			r.path = e.Mount.Path
		}
		got = append(got, r)
	}
	want := []row{
		{"payments", "app", true, "/cfg/payments/", true},
		{"leads", "app", false, "", false},
		{"support", "app", true, "/cfg/support/", true},
		{"newsletter", "app", false, "", false},
		{"demo", "app", false, "", false},
		{"cache", "module", false, "", true},
	}
	if body.Count != 6 || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %d %+v\nwant %+v", body.Count, got, want)
	}
	if p := body.Extensions[0].Settings; p["crypto_api_key"] != config.Masked || p["crypto_webhook_secret"] != config.Masked {
		t.Errorf("payments secrets in list: %v", p)
	}
	if c := body.Extensions[5].Settings; !reflect.DeepEqual(c, map[string]any{"enabled": false}) {
		t.Errorf("disabled module settings: %v", c)
	}
}

// TestNoSecretLeaks goes through every way the package shows settings, with
// every secret set, and looks for the secrets in what comes out.
func TestNoSecretLeaks(t *testing.T) {
	var logs bytes.Buffer
	text := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	jsonLog := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// A request logger in the chain, as an operator might configure one.
	registry := map[string]mux.MiddlewareFunc{"log": func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			text.InfoContext(r.Context(), "request", "method", r.Method, "path", r.URL.Path)
			next.ServeHTTP(w, r)
		})
	}}
	env := with(allOn(), "EXTENSIONS__ENABLED", "payments,leads,support,newsletter,demo",
		"PAYMENTS__MIDDLEWARE_CLASSES", "log", "LEADS__MIDDLEWARE_CLASSES", "log")
	s := mustLoad(t, env, plus(demo(), cache()))
	s.Log(context.Background(), text)
	s.Log(context.Background(), jsonLog)

	// The typed settings themselves, logged or printed whole.
	for _, name := range []string{"payments", "leads"} {
		cfg, _ := s.Settings(name)
		text.Info("settings", "cfg", cfg)
		jsonLog.Info("settings", "cfg", cfg)
	}

	router := newRouter(t, s, registry)
	var out strings.Builder
	for _, path := range []string{
		"/cfg/payments/api/", "/cfg/leads/api/", "/cfg/support/api/", "/cfg/newsletter/api/", "/cfg/demo/api/",
		"/cfg/payments/nope/", "/cfg/payments/api", ListPath,
	} {
		for _, method := range []string{"GET", "HEAD", "POST"} {
			rec := do(router, method, path, staffHeader, "staff")
			out.WriteString(rec.Body.String())
			for k, v := range rec.Header() {
				out.WriteString(k + ": " + strings.Join(v, ",") + "\n")
			}
		}
	}
	assertNoSecret(t, "responses", out.String())
	assertNoSecret(t, "log", logs.String())
	if !strings.Contains(logs.String(), `crypto_api_key\":\"****\"`) && !strings.Contains(logs.String(), `"crypto_api_key":"****"`) {
		t.Fatalf("log does not show the masked key:\n%s", logs.String())
	}

	// Settings errors next to set secrets.
	r := config.NewReader(config.FromMaps(with(env, "SUPPORT__SLA_HOURS", "0", "EXTENSIONS__ENABLED", "payments,leads,bogus"), nil))
	if _, err := Load(r, Builtin()); err != nil {
		t.Fatal(err)
	}
	if r.Err() == nil {
		t.Fatal("expected settings problems")
	}
	assertNoSecret(t, "settings error", r.Err().Error())
}
