package grpc_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/api"
	"github.com/cfgd/cfgd/api/auth/authtest"
	apigrpc "github.com/cfgd/cfgd/api/grpc"
	"github.com/cfgd/cfgd/api/protos"
	"github.com/cfgd/cfgd/commands/apikey"
	"github.com/cfgd/cfgd/deploy/testenv"
	rmapikey "github.com/cfgd/cfgd/readmodels/apikey"
)

// Every route Mount adds is described in docs/openapi.yaml.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	router, err := api.NewRouter(testenv.Quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := protos.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	keyAuth, err := rmapikey.NewAuthenticator(e.Pool, rmapikey.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = apigrpc.Mount(router, apigrpc.Deps{
		Staff: e.API.Staff(), Pool: e.Pool, Keys: rmapikey.NewKeys(e.Pool, nil), KeyAuth: keyAuth,
		Create: apikey.NewCreateHandler(e.Pool, e.Clock.Now), Revoke: apikey.NewRevokeHandler(e.Pool, e.Clock.Now),
		Health: func() apigrpc.Health { return apigrpc.Health{} }, Protos: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	pattern := regexp.MustCompile(`\{(\w+):[^}]*\}`)
	seen := 0
	err = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := route.GetPathTemplate()
		if err != nil || tpl == "/metrics" {
			return nil
		}
		seen++
		tpl = pattern.ReplaceAllString(tpl, "{$1}")
		if !strings.Contains(string(spec), "\n  "+tpl+":\n") {
			t.Errorf("docs/openapi.yaml does not describe %s", tpl)
		}
		return nil
	})
	if err != nil || seen != 10 {
		t.Fatalf("walked %d routes: %v", seen, err)
	}
}
