package tasks_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	tasksapi "github.com/cfgd/cfgd/api/tasks"
)

// Every task route (but the static assets) is described in docs/openapi.yaml.
func TestOpenAPICoversEveryTaskRoute(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	pass := func(h http.Handler) http.Handler { return h }
	tasksapi.Mount(r, pass, nil)
	if err := tasksapi.MountDashboard(r, pass); err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := route.GetPathTemplate()
		if err != nil || strings.HasPrefix(tpl, tasksapi.PathStatic) {
			return nil
		}
		seen++
		if !strings.Contains(string(spec), "\n  "+tpl+":\n") {
			t.Errorf("docs/openapi.yaml does not describe %s", tpl)
		}
		return nil
	})
	if err != nil || seen != 7 {
		t.Fatalf("walked %d routes: %v", seen, err)
	}
}
