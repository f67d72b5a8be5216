package rest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/process"
)

// /readyz gives each failing check a reason of the fixed vocabulary and,
// where one helps, the command or the fix; never the error's own text,
// which names hosts, tables and settings to a caller without credentials.
func TestReadyzGivesAReasonNeverTheError(t *testing.T) {
	const internal = "dial tcp 10.0.0.7:5432: secret-table-name"
	checks := []process.Check{{Name: "up", Ping: func(context.Context) error { return nil }}}
	want := map[string]process.Reason{}
	for _, r := range process.Reasons() {
		name := "check-" + string(r)
		err := process.NotReady(r, errors.New(internal))
		switch r {
		case process.Unreachable:
			err = fmt.Errorf("postgres: %w", errors.New(internal)) // no reason: unreachable
		case process.Timeout:
			err = nil // hangs past the timeout below
		}
		checks = append(checks, process.Check{Name: name, Ping: func(ctx context.Context) error {
			if err == nil {
				<-ctx.Done()
				return ctx.Err()
			}
			return fmt.Errorf("wrapped: %w", err)
		}})
		want[name] = r
	}
	w := httptest.NewRecorder()
	rest.Ready(100*time.Millisecond, checks...).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", w.Code)
	}
	if strings.Contains(w.Body.String(), "secret-table-name") || strings.Contains(w.Body.String(), "10.0.0.7") {
		t.Fatalf("the error's text reached /readyz: %s", w.Body)
	}
	var body struct {
		Error  string `json:"error"`
		Checks []struct {
			Name, Error, Command, Fix string
			OK                        bool
		} `json:"checks"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Checks) != len(want)+1 {
		t.Fatalf("%d checks in %s", len(body.Checks), w.Body)
	}
	for _, c := range body.Checks {
		r, failing := want[c.Name]
		switch {
		case !failing:
			if !c.OK || c.Error != "" {
				t.Errorf("%s: %+v, want ok", c.Name, c)
			}
		case c.OK || c.Error != string(r) || c.Command != r.Command() || c.Fix != r.Fix():
			t.Errorf("%s: %+v, want reason %q, command %q, fix %q", c.Name, c, r, r.Command(), r.Fix())
		}
	}
	for _, s := range []string{"check-unreachable unreachable", "check-views_missing views_missing (run `cfgd replay requestlog.clickhouse`)", "check-tables_missing tables_missing (run `cfgd migrate`)"} {
		if !strings.Contains(body.Error, s) {
			t.Errorf("error %q does not say %q", body.Error, s)
		}
	}
	if process.ViewsMissing.Command() == "" || process.Fenced.Fix() == "" || process.CheckpointAhead.Fix() == "" || process.ClickHouseProfile.Fix() == "" {
		t.Error("a reason that needs an action names none")
	}
}

// The OpenAPI document lists the same vocabulary as the code.
func TestReadinessReasonsAreDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range process.Reasons() {
		names = append(names, string(r))
	}
	if want := "enum: [" + strings.Join(names, ", ") + "]"; !strings.Contains(string(b), want) {
		t.Errorf("docs/openapi.yaml's Readiness does not list %s", want)
	}
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(string(ops), "| `"+n+"` |") {
			t.Errorf("docs/operations.md's table of readiness reasons lacks %s", n)
		}
	}
}
