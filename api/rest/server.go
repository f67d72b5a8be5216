package rest

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// NewRouter returns the root router with JSON 404/405 answers, request
// logging and latency metrics. /metrics is mounted by the caller
// (MountMetrics), on this router or on a listener of its own.
func NewRouter(log *slog.Logger, reg *prometheus.Registry) (*mux.Router, error) {
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	// No path cleaning: gorilla/mux would answer a path with "." or ".."
	// segments with a redirect to the cleaned one; every route gets the
	// path as sent instead, so a traversal attempt is refused by the
	// handler that owns the prefix (a 400 or 404), never redirected.
	r := mux.NewRouter().SkipClean(true)
	r.NotFoundHandler = Observe(log, m)(NotFound())
	r.MethodNotAllowedHandler = Observe(log, m)(MethodNotAllowed())
	r.Use(Observe(log, m))
	return r, nil
}

// MetricsPath is where Prometheus scrapes.
const MetricsPath = "/metrics"

// MountMetrics serves reg's metrics at /metrics on r. A non-empty token
// must come as "Authorization: Bearer <token>" (compared in constant time):
// metrics name routes, dependencies and volumes, which is more than a
// stranger should see.
func MountMetrics(r *mux.Router, reg *prometheus.Registry, token string) {
	r.Handle(MetricsPath, bearer(token, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))).Methods(http.MethodGet)
}

// PprofPath is the prefix of Go's runtime profiles (METRICS__PPROF).
const PprofPath = "/debug/pprof/"

// MountPprof serves Go's runtime profiles under /debug/pprof/ on r (the
// metrics listener), behind token as MountMetrics: a heap or CPU profile
// of a replica under load, to see where its memory and time go.
func MountPprof(r *mux.Router, token string) {
	r.Handle(PprofPath+"cmdline", bearer(token, http.HandlerFunc(pprof.Cmdline)))
	r.Handle(PprofPath+"profile", bearer(token, http.HandlerFunc(pprof.Profile)))
	r.Handle(PprofPath+"symbol", bearer(token, http.HandlerFunc(pprof.Symbol)))
	r.Handle(PprofPath+"trace", bearer(token, http.HandlerFunc(pprof.Trace)))
	// Index serves the named profiles (heap, goroutine, allocs...) too.
	r.PathPrefix(PprofPath).Handler(bearer(token, http.HandlerFunc(pprof.Index)))
}

// bearer wraps h so that a non-empty token must come as
// "Authorization: Bearer <token>" (compared in constant time).
func bearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if subtle.ConstantTimeCompare([]byte(req.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cfgd metrics"`)
			WriteError(w, errcode.New(errcode.NotAuthenticated, "metrics need the METRICS__TOKEN bearer token"))
			return
		}
		h.ServeHTTP(w, req)
	})
}

// Server is an http.Server with cfgd's timeouts and graceful shutdown.
type Server struct {
	srv     *http.Server
	log     *slog.Logger
	drain   time.Duration
	started chan string
}

// NewServer serves h on addr; drain bounds how long shutdown waits for
// in-flight requests.
func NewServer(addr string, h http.Handler, drain time.Duration, log *slog.Logger) *Server {
	return &Server{
		srv: &http.Server{
			Addr:              addr,
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       120 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		log:     log,
		drain:   drain,
		started: make(chan string, 1),
	}
}

// Started yields the bound address once the listener is open.
func (s *Server) Started() <-chan string { return s.started }

// Run serves until ctx ends, then stops accepting and waits up to the drain
// time for in-flight requests.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.srv.Addr)
	if err != nil {
		return fmt.Errorf("http listen %s: %w", s.srv.Addr, err)
	}
	s.started <- ln.Addr().String()
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), s.drain)
	defer cancel()
	s.log.Info("http draining", "timeout", s.drain)
	if err := s.srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http serve: %w", err)
	}
	return nil
}
