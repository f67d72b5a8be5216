package rest

// /healthz says the process is up; /readyz that every dependency answers,
// naming the ones that do not.

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/deploy/process"
)

// MountHealth adds the two endpoints to r.
func MountHealth(r *mux.Router, timeout time.Duration, checks ...process.Check) {
	r.Handle("/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		JSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/readyz", Ready(timeout, checks...)).Methods(http.MethodGet, http.MethodHead)
}

type result struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Ready runs every check in parallel within timeout; any failure gives 503
// with the failing dependencies named.
func Ready(timeout time.Duration, checks ...process.Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		results := runChecks(r.Context(), timeout, checks)
		var down []string
		for _, res := range results {
			if !res.OK {
				down = append(down, res.Name)
			}
		}
		if len(down) > 0 {
			// The error body plus each check's result.
			JSON(w, errcode.Unavailable.HTTPStatus(), map[string]any{
				"success": false, "code": errcode.Unavailable, "status": "unavailable",
				"error": "not ready: " + joinNames(down) + " unreachable", "checks": results,
			})
			return
		}
		JSON(w, http.StatusOK, map[string]any{"status": "ready", "checks": results})
	})
}

// runChecks runs every check in parallel within timeout.
func runChecks(ctx context.Context, timeout time.Duration, checks []process.Check) []result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results := make([]result, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			results[i] = result{Name: c.Name, OK: true}
			if err := c.Ping(ctx); err != nil {
				// The error text names a host at most; it carries no secret
				// because URLs are redacted before they reach a client.
				results[i] = result{Name: c.Name, Error: "unreachable"}
			}
		})
	}
	wg.Wait()
	return results
}

func joinNames(names []string) string {
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out
}
