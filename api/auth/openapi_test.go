package auth_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/auth/authtest"
)

// Every route the sign-in feature mounts is described in docs/openapi.yaml.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	router := authtest.Router(t, e.App, e.Pool, e.Clock.Now)
	pattern := regexp.MustCompile(`\{([a-z_]+):[^}]*\}`)
	seen := 0
	err = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := route.GetPathTemplate()
		if err != nil || tpl == "/metrics" {
			return nil
		}
		seen++
		// A mux variable's pattern ({file:.+}) is not part of an OpenAPI path.
		tpl = pattern.ReplaceAllString(tpl, "{$1}")
		if !strings.Contains(string(spec), "\n  "+tpl+":\n") {
			t.Errorf("docs/openapi.yaml does not describe %s", tpl)
		}
		return nil
	})
	if err != nil || seen < 9 {
		t.Fatalf("walked %d routes: %v", seen, err)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if !strings.Contains(string(spec), "\n  "+p+":\n") {
			t.Errorf("docs/openapi.yaml does not describe %s", p)
		}
	}
}
