package extensions

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/mux"
)

// FuzzLoadMount feeds arbitrary operator input to the parsers of
// EXTENSIONS__ENABLED, url_prefix, url_namespace and middleware_classes.
// Whatever comes in, Load must not panic, and a Set it accepts must mount and
// answer its API root at the path it promises.
func FuzzLoadMount(f *testing.F) {
	f.Add("payments,leads", "pay", "ns", "a,b")
	f.Add("payments", "grpc", "", "")
	f.Add(" Support ,,support", "a/b", "x:y", "a,a")
	f.Add("demo", "leads", "payments", "ghost")
	f.Add("cache", "..", "", "")
	f.Add("payments,demo", "demo", "", "b,a")
	f.Fuzz(func(t *testing.T, enabled, prefix, namespace, middleware string) {
		env := with(allOn(),
			"EXTENSIONS__ENABLED", enabled,
			"PAYMENTS__URL_PREFIX", prefix,
			"PAYMENTS__URL_NAMESPACE", namespace,
			"PAYMENTS__MIDDLEWARE_CLASSES", middleware,
			"DEMO__URL_PREFIX", namespace,
		)
		s, problems := load(t, env, nil, plus(demo(), cache()))
		registry := map[string]mux.MiddlewareFunc{
			"a": func(h http.Handler) http.Handler { return h },
			"b": func(h http.Handler) http.Handler { return h },
		}
		router := mux.NewRouter()
		err := s.Mount(router, registry, fakeStaff)
		if problems != nil {
			if err == nil {
				t.Fatalf("mounted despite settings problems: %v", problems)
			}
			return
		}
		if err != nil {
			// Only the registry can still say no.
			if !strings.Contains(err.Error(), "__MIDDLEWARE_CLASSES: expected middleware names") {
				t.Fatalf("settings accepted but Mount failed: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, e := range s.entries {
			if !e.mounted() {
				continue
			}
			p := e.prefix()
			if !validSegment(p) || reservedPrefix(p) || seen[p] {
				t.Fatalf("accepted prefix %q", p)
			}
			seen[p] = true
			if rec := do(router, "GET", "/cfg/"+p+"/api/"); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"name":"`+e.ext.Name+`"`) {
				t.Fatalf("API root of %s at /cfg/%s/api/: %d %s", e.ext.Name, p, rec.Code, rec.Body)
			}
		}
	})
}

// FuzzValidSegment checks that an accepted segment can never leave its place
// in the URL.
func FuzzValidSegment(f *testing.F) {
	for _, s := range []string{"payments", "a-b_c", "", "..", "a/b", "A", "%2F", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !validSegment(s) {
			return
		}
		if s == "" || len(s) > maxSegment || strings.ContainsAny(s, "/.%?#:{} \t\n") || strings.ToLower(s) != s {
			t.Fatalf("accepted %q", s)
		}
	})
}
