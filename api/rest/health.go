package rest

// /healthz says the process is up; /readyz that every dependency answers,
// naming the ones that do not, each with its reason (process.Reason) and,
// where one helps, the command to run.

import (
	"context"
	"net/http"
	"strings"
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

// result is one check as /readyz shows it. Error is a reason of the
// fixed vocabulary (process.Reason), never the error's text; Command and
// Fix say what to do where the reason has one.
type result struct {
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	Command string `json:"command,omitempty"`
	Fix     string `json:"fix,omitempty"`
}

// Ready runs every check in parallel within timeout; any failure gives 503
// with the failing dependencies named.
func Ready(timeout time.Duration, checks ...process.Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		results := runChecks(r.Context(), timeout, checks)
		var down []string
		for _, res := range results {
			if !res.OK {
				d := res.Name + " " + res.Error
				if res.Command != "" {
					d += " (run `" + res.Command + "`)"
				}
				down = append(down, d)
			}
		}
		if len(down) > 0 {
			// The error body plus each check's result.
			JSON(w, errcode.Unavailable.HTTPStatus(), map[string]any{
				"success": false, "code": errcode.Unavailable, "status": "unavailable",
				"error": "not ready: " + strings.Join(down, ", "), "checks": results,
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
				// The reason alone: the error's text (hosts, tables,
				// settings) is the log's, and /readyz needs no credentials.
				reason := process.ReasonOf(err)
				results[i] = result{Name: c.Name, Error: string(reason), Command: reason.Command(), Fix: reason.Fix()}
			}
		})
	}
	wg.Wait()
	return results
}
