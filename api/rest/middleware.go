package rest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/deploy/errcode"
)

type ctxKey int

const requestIDKey ctxKey = iota

// RequestID returns the id the logging middleware gave the request.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Metrics holds the HTTP collectors.
type Metrics struct {
	latency *prometheus.HistogramVec
}

// NewMetrics registers the HTTP collectors with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cfgd_http_request_duration_seconds",
		Help:    "HTTP request latency by route template, method and status.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"route", "method", "status"})}
	if err := reg.Register(m.latency); err != nil {
		return nil, fmt.Errorf("http metrics: %w", err)
	}
	return m, nil
}

// MethodLabel is the method as a metric label or log field. A client may
// send any token as its method (up to the header limit), and each new
// label value is a series /metrics keeps for good, so every method outside
// RFC 9110's and PATCH is "other".
func MethodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// Observe is the middleware that logs each request and records its latency
// under the route template (never the raw path, which would explode the
// label set). It also turns a panic into a JSON 500 without a stack trace in
// the response, and marks every response nosniff, so a browser never
// renders a JSON body (which may echo client input) as HTML or script.
func Observe(log *slog.Logger, m *Metrics) mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			id := r.Header.Get("X-Request-ID")
			if id == "" || len(id) > 64 {
				b := make([]byte, 8)
				_, _ = rand.Read(b)
				id = hex.EncodeToString(b)
			}
			w.Header().Set("X-Request-ID", id)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			r = r.WithContext(context.WithValue(r.Context(), requestIDKey, id))
			sw := &statusWriter{ResponseWriter: w}
			defer func() {
				if p := recover(); p != nil {
					if p == http.ErrAbortHandler {
						panic(p)
					}
					log.ErrorContext(r.Context(), "handler panic", "request_id", id, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
					if sw.status == 0 {
						WriteError(sw, errcode.New(errcode.Internal, errcode.MessageInternal))
					}
				}
				route := "unmatched"
				if cr := mux.CurrentRoute(r); cr != nil {
					if tpl, err := cr.GetPathTemplate(); err == nil {
						route = tpl
					}
				}
				status := sw.status
				if status == 0 {
					status = http.StatusOK
				}
				d := time.Since(start)
				method := MethodLabel(r.Method)
				if m != nil {
					m.latency.WithLabelValues(route, method, strconv.Itoa(status)).Observe(d.Seconds())
				}
				lvl := slog.LevelInfo
				if status >= 500 {
					lvl = slog.LevelError
				}
				log.Log(r.Context(), lvl, "http request", "request_id", id, "method", method, "route", route,
					"status", status, "bytes", sw.bytes, "duration_ms", float64(d.Microseconds())/1000)
			}()
			next.ServeHTTP(sw, r)
		})
	}
}

// NoStore forbids every cache (browser, proxy) to keep the response: for
// answers that carry tokens or set a session cookie.
func NoStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
}

// NotFound answers unknown paths with the JSON error shape.
func NotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, errcode.New(errcode.NotFound, "no such endpoint: "+r.URL.Path))
	})
}

// MethodNotAllowed answers a known path with the wrong method.
func MethodNotAllowed() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, errcode.New(errcode.MethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path))
	})
}
