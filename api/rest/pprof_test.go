package rest_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
)

// The profiles (METRICS__PPROF) answer behind the metrics token as
// /metrics does: a heap profile names the code holding memory.
func TestPprofBehindTheMetricsToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, token, auth, path string
		want                    int
	}{
		{"heap, no token set", "", "", "/debug/pprof/heap?debug=1", http.StatusOK},
		{"index", "", "", "/debug/pprof/", http.StatusOK},
		{"heap with the token", "s3cret", "Bearer s3cret", "/debug/pprof/heap?debug=1", http.StatusOK},
		{"heap without it", "s3cret", "", "/debug/pprof/heap?debug=1", http.StatusUnauthorized},
		{"cmdline with a wrong one", "s3cret", "Bearer nope", "/debug/pprof/cmdline", http.StatusUnauthorized},
		{"symbol without it", "s3cret", "", "/debug/pprof/symbol", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mux.NewRouter()
			rest.MountPprof(r, tc.token)
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			if w.Code != tc.want {
				t.Fatalf("GET %s: %d, want %d: %s", tc.path, w.Code, tc.want, w.Body.String())
			}
		})
	}
}
