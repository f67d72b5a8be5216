package main

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/cmd/cfgd/modules"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/projections/replay"
)

// Every route cfgd serve mounts, with every extension turned on, is
// described in docs/openapi.yaml; so are the routes outside the router's
// walk (/metrics, /healthz, /readyz).
func TestOpenAPICoversEveryRoute(t *testing.T) {
	spec, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(spec)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"POSTGRES__URL":                            testenv.PostgresURL(t),
		"AUTH__KEYS_DIR":                           t.TempDir(),
		"MEDIA__DIR":                               t.TempDir(),
		"GRPC__PROTO_DIR":                          t.TempDir(),
		"EXTENSIONS__ENABLED":                      "payments,leads,support,newsletter",
		"PAYMENTS_API_KEYS__CRYPTO_API_KEY":        "ck_test_0123456789",
		"PAYMENTS_API_KEYS__CRYPTO_WEBHOOK_SECRET": "whsec_0123456789",
		"TELEGRAM__BOT_TOKEN":                      "123:abc",
		"LEADS__NOTIFICATION_EMAIL":                "leads@example.com",
		"NEWSLETTER__FROM_EMAIL":                   "news@example.com",
		"NEWSLETTER__FROM_NAME":                    "News",
	}
	r := config.NewReader(config.FromMaps(env, nil))
	app, err := readApp(r)
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := openDeps(ctx, app.Core)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	log := testenv.Quiet()
	busCfg := kafka.Config{Brokers: []string{"127.0.0.1:1"}, Partitions: 1}
	mods, err := buildModules(ctx, wiring{log: log, app: app, deps: d, bus: busCfg})
	if err != nil {
		t.Fatal(err)
	}
	// serve runs, and cfgd replay rebuilds, what one registry built from
	// the modules lists: every projection (the reactor only listed) and
	// the request log's ClickHouse tables.
	reg, err := events.NewRegistry(eventTypes()...)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := registry(d, reg, mods)
	if err != nil {
		t.Fatal(err)
	}
	var served, replayable []string
	for _, p := range modules.Projections(mods...) {
		served = append(served, p.Name)
	}
	for _, e := range rr.All() {
		if e.Target != nil || e.Kind == replay.KindReactor {
			replayable = append(replayable, e.Name)
		}
	}
	served = append(served, replay.RequestLogName)
	slices.Sort(served)
	slices.Sort(replayable)
	if !slices.Equal(served, replayable) {
		t.Errorf("serve runs %v, cfgd replay knows %v", served, replayable)
	}
	if got := len(rr.Projections()); got != len(modules.Projections(mods...)) {
		t.Errorf("the registry hands serve %d projections, the modules declare %d", got, len(modules.Projections(mods...)))
	}
	metrics := prometheus.NewRegistry()
	router, err := newRouter(log, metrics, d, busCfg, mods)
	if err != nil {
		t.Fatal(err)
	}
	rest.MountMetrics(router, metrics, "")
	pattern := regexp.MustCompile(`\{([a-z_]+):[^}]*\}`)
	seen := 0
	err = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := route.GetPathTemplate()
		if err != nil {
			return nil
		}
		// A subrouter's PathPrefix is a prefix, not a path.
		if re, err := route.GetPathRegexp(); err == nil && !strings.HasSuffix(re, "$") {
			return nil
		}
		seen++
		// A mux variable's pattern ({file:.+}) is not part of an OpenAPI path.
		tpl = pattern.ReplaceAllString(tpl, "{$1}")
		if !strings.Contains(string(spec), "\n  "+tpl+":\n") {
			t.Errorf("docs/openapi.yaml does not describe %s", tpl)
			return nil
		}
		// Every method the route takes is an operation (HEAD goes with GET;
		// a route without methods is a 405 catch-all).
		methods, err := route.GetMethods()
		if err != nil {
			return nil
		}
		for _, m := range methods {
			if m != http.MethodHead && doc.Paths.Value(tpl).GetOperation(m) == nil {
				t.Errorf("docs/openapi.yaml has no %s %s", m, tpl)
			}
		}
		return nil
	})
	if err != nil || seen < 20 {
		t.Fatalf("walked %d routes: %v", seen, err)
	}
}
