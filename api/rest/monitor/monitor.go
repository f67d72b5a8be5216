// Package monitor is the HTTP side of the request log: the ingest endpoint
// (POST /api/grpc/monitor/ingest/) over the request-log producer, and the
// staff query endpoints of docs/api.md over the request-log read model.
package monitor

import (
	"context"
	"crypto/sha256"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlog/ingestmetrics"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// Limits of one ingest call.
const (
	MaxIngestBytes  = 8 << 20
	MaxIngestEvents = 10_000
)

// Producer takes validated events to the request-log topic; it fails with
// an error wrapping requestlog.ErrUnavailable when Kafka is down.
type Producer interface {
	Produce(ctx context.Context, events []requestlog.Event) error
}

// Queries are the read-model questions the endpoints ask.
type Queries interface {
	Requests(ctx context.Context, f requestlogview.Filter) ([]requestlogview.Request, int64, error)
	Overview(ctx context.Context, hours int) (requestlogview.Overview, error)
	Services(ctx context.Context, hours int) ([]requestlogview.Service, error)
	Methods(ctx context.Context, hours int, service string) ([]requestlogview.Method, error)
	Timeline(ctx context.Context, hours int, service string) (requestlogview.Timeline, error)
	Latency(ctx context.Context, f requestlogview.SeriesFilter) (requestlogview.Latency, error)
	Callers(ctx context.Context, f requestlogview.BreakdownFilter) ([]requestlogview.Caller, error)
	StatusCodes(ctx context.Context, f requestlogview.BreakdownFilter) ([]requestlogview.StatusCode, error)
	Request(ctx context.Context, id uint64) (requestlogview.Request, error)
}

// HeaderIdempotencyKey names an ingest call, so its retries within 24 h
// get its first answer and count nothing again.
const HeaderIdempotencyKey = "Idempotency-Key"

// Handlers serve the endpoints.
type Handlers struct {
	accept  *requestlog.Accepter
	queries Queries
	metrics *ingestmetrics.Metrics // nil: nothing counted
}

// WithIdempotency makes ingest honour Idempotency-Key through store (the
// accept path's protocol, requestlog.Accepter.Once); it returns h.
func (h *Handlers) WithIdempotency(store requestlog.KeyStore) *Handlers {
	h.accept.Keys = store
	return h
}

// New returns the handlers, taking created_at within the default
// retention (WithWindow sets the configured one).
func New(p Producer, q Queries, now func() time.Time) *Handlers {
	a := &requestlog.Accepter{Now: now, Window: requestlog.WindowFor(DefaultRetentionDays)}
	if p != nil {
		a.Produce = p.Produce
	}
	return &Handlers{accept: a, queries: q}
}

// DefaultRetentionDays is the sink's default retention.
const DefaultRetentionDays = 30

// WithWindow makes ingest refuse events whose created_at is outside w
// (requestlog.WindowFor the sink's retention); it returns h.
func (h *Handlers) WithWindow(w requestlog.Window) *Handlers {
	h.accept.Window = w
	return h
}

// Mount adds the endpoints: ingest behind ingestAuth (staff or API key),
// the queries behind staff.
func (h *Handlers) Mount(r *mux.Router, staff, ingestAuth mux.MiddlewareFunc) {
	r.Handle("/api/grpc/monitor/ingest/", ingestAuth(http.HandlerFunc(h.ingest))).Methods(http.MethodPost)
	r.Handle("/api/grpc/monitor/requests/", staff(http.HandlerFunc(h.requests))).Methods(http.MethodGet)
	r.Handle("/api/grpc/monitor/overview/", staff(http.HandlerFunc(h.overview))).Methods(http.MethodGet)
	r.Handle("/api/grpc/monitor/services/", staff(http.HandlerFunc(h.services))).Methods(http.MethodGet)
	r.Handle("/api/grpc/monitor/methods/", staff(http.HandlerFunc(h.methods))).Methods(http.MethodGet)
	r.Handle("/api/grpc/monitor/timeline/", staff(http.HandlerFunc(h.timeline))).Methods(http.MethodGet)
	h.mountPage(r, staff)
}

// IngestResult is the answer of the ingest endpoint to a batch of which
// something was stored (202), partly (Success false, Errors naming each
// refused event) or all of it.
type IngestResult struct {
	Success  bool                    `json:"success"`
	Accepted int                     `json:"accepted"`
	Rejected int                     `json:"rejected"`
	Errors   []requestlog.FieldError `json:"errors,omitempty"`
}

// ingest takes a JSON array of events, or NDJSON (one event per line),
// read as a stream. Valid events are produced even when others are not;
// the answer is 400 only when nothing was stored.
func (h *Handlers) ingest(w http.ResponseWriter, r *http.Request) {
	ndjson, bad := ingestType(r.Header.Get("Content-Type"))
	if bad != nil {
		h.metrics.Rejected(ingestmetrics.REST, ingestmetrics.Malformed, 1)
		rest.WriteError(w, bad)
		return
	}
	if h.accept.Produce == nil {
		rest.WriteError(w, errcode.New(errcode.NotImplemented, "the request log is not configured on this server"))
		return
	}
	key := r.Header.Get(HeaderIdempotencyKey)
	keyed := key != "" && h.accept.Keys != nil
	caller := callerOf(r)
	if keyed {
		// Before the body is read: the key's form, the caller's room.
		if err := h.accept.Admit(r.Context(), caller, key); err != nil {
			rest.Fail(w, r, err)
			return
		}
	}
	body := io.Reader(http.MaxBytesReader(w, r.Body, MaxIngestBytes))
	sum := sha256.New()
	if keyed {
		body = io.TeeReader(body, sum)
	}
	batch, refused, err := DecodeEvents(body, ndjson, MaxIngestEvents)
	if err != nil {
		h.metrics.Rejected(ingestmetrics.REST, ingestmetrics.Malformed, 1)
		rest.Fail(w, r, err)
		return
	}
	// Who posted is the one field of a report cfgd checked itself.
	batch = requestlog.ReportedAs(batch, reporterOf(r))
	run := func(ctx context.Context) (requestlog.Outcome, error) {
		out, err := h.accept.Accept(ctx, batch, refused)
		h.metrics.Rejected(ingestmetrics.REST, ingestmetrics.Invalid, out.Rejected)
		return out, err
	}
	var out requestlog.Outcome
	if keyed {
		var replayed bool
		out, replayed, err = h.accept.Once(r.Context(), caller, key, sum.Sum(nil), run)
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
	} else {
		out, err = run(r.Context())
	}
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusAccepted, IngestResult{Success: out.Rejected == 0, Accepted: out.Accepted, Rejected: out.Rejected, Errors: out.Errors})
}

// callerOf names who sent r, the scope of its Idempotency-Key: the API
// key, or the user.
func callerOf(r *http.Request) string {
	p, ok := auth.PrincipalFrom(r.Context())
	switch {
	case !ok || p == nil:
		return "anonymous"
	case p.Via == auth.ViaAPIKey:
		return requestlog.KeyCaller(p.KeyID)
	}
	return requestlog.UserCaller(p.UserID)
}

// reporterOf is the reported_by of what r posts: its API key, or its user.
func reporterOf(r *http.Request) string {
	p, ok := auth.PrincipalFrom(r.Context())
	switch {
	case !ok || p == nil:
		return ""
	case p.Via == auth.ViaAPIKey:
		return requestlog.ReportedByKey(p.KeyID)
	}
	return requestlog.ReportedByUser(p.UserID)
}

// ingestType checks the Content-Type: JSON (an array) or NDJSON.
func ingestType(ct string) (ndjson bool, err *errcode.Error) {
	if ct == "" {
		return false, nil
	}
	mt, params, perr := mime.ParseMediaType(ct)
	if cs, ok := params["charset"]; perr != nil || (ok && !strings.EqualFold(cs, "utf-8")) {
		return false, errcode.New(errcode.UnsupportedMediaType, "Content-Type must be application/json or application/x-ndjson (utf-8)")
	}
	switch mt {
	case "application/json":
		return false, nil
	case "application/x-ndjson":
		return true, nil
	}
	return false, errcode.New(errcode.UnsupportedMediaType, "Content-Type must be application/json or application/x-ndjson (utf-8)")
}

// hoursOr400 reads the query string and its hours with parse, the window
// every statistics endpoint takes; a bad one is answered and ok is false.
func hoursOr400(w http.ResponseWriter, r *http.Request, parse func(string) (int, error)) (q url.Values, hours int, ok bool) {
	q, err := rest.Query(r)
	if err == nil {
		hours, err = parse(q.Get("hours"))
	}
	if err != nil {
		rest.Fail(w, r, err)
		return nil, 0, false
	}
	return q, hours, true
}

func (h *Handlers) requests(w http.ResponseWriter, r *http.Request) {
	q, ok := rest.QueryOr400(w, r)
	if !ok {
		return
	}
	page, size, err1 := requestlogview.ParsePage(q.Get("page"), q.Get("page_size"))
	// Without hours the list is not windowed and, unlike the page's newer
	// endpoints, includes cfgd's own traffic: the answers it always gave.
	var hours int
	var err2 error
	if q.Has("hours") {
		hours, err2 = requestlogview.ParseHours(q.Get("hours"))
	}
	internal, err3 := requestlogview.ParseIncludeInternal(q.Get("include_internal"), true)
	if err := errcode.Join(err1, err2, err3); err != nil {
		rest.Fail(w, r, err)
		return
	}
	results, count, err := h.queries.Requests(r.Context(), requestlogview.Filter{
		Service: q.Get("service"), Method: q.Get("method"), Status: q.Get("status"), Code: q.Get("grpc_status_code"), Page: page, PageSize: size,
		Hours: hours, ExcludeInternal: !internal,
	})
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, map[string]any{"results": results, "count": count})
}

func (h *Handlers) overview(w http.ResponseWriter, r *http.Request) {
	_, hours, ok := hoursOr400(w, r, requestlogview.ParseHours)
	if !ok {
		return
	}
	o, err := h.queries.Overview(r.Context(), hours)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, o)
}

func (h *Handlers) services(w http.ResponseWriter, r *http.Request) {
	_, hours, ok := hoursOr400(w, r, requestlogview.ParseHours)
	if !ok {
		return
	}
	s, err := h.queries.Services(r.Context(), hours)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, map[string]any{"services": s})
}

func (h *Handlers) methods(w http.ResponseWriter, r *http.Request) {
	q, hours, ok := hoursOr400(w, r, requestlogview.ParseHours)
	if !ok {
		return
	}
	m, err := h.queries.Methods(r.Context(), hours, q.Get("service"))
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, map[string]any{"methods": m})
}

// timeline is the per-minute series the monitoring page charts.
func (h *Handlers) timeline(w http.ResponseWriter, r *http.Request) {
	q, hours, ok := hoursOr400(w, r, requestlogview.ParseTimelineHours)
	if !ok {
		return
	}
	tl, err := h.queries.Timeline(r.Context(), hours, q.Get("service"))
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, tl)
}
