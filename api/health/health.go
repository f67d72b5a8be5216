// Package health serves /healthz (the process is up) and /readyz (every
// dependency answers), naming the dependency that does not.
package health

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/web"
)

// Check pings one dependency.
type Check struct {
	Name string
	Ping func(ctx context.Context) error
}

// Mount adds the two endpoints to r.
func Mount(r *mux.Router, timeout time.Duration, checks ...Check) {
	r.Handle("/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		web.JSON(w, http.StatusOK, map[string]any{"status": "ok"})
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
func Ready(timeout time.Duration, checks ...Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
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
		var down []string
		for _, res := range results {
			if !res.OK {
				down = append(down, res.Name)
			}
		}
		if len(down) > 0 {
			web.JSON(w, http.StatusServiceUnavailable, map[string]any{
				"success": false, "code": "unavailable", "status": "unavailable",
				"error": "not ready: " + joinNames(down) + " unreachable", "checks": results,
			})
			return
		}
		web.JSON(w, http.StatusOK, map[string]any{"status": "ready", "checks": results})
	})
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
