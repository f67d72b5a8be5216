// Package monitor is the HTTP side of the request log: the ingest endpoint
// (POST /api/grpc/monitor/ingest/) over the request-log producer, and the
// staff query endpoints of SPEC.md 4.3 over the request-log read model.
package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
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

// Handlers serve the endpoints.
type Handlers struct {
	producer Producer
	queries  Queries
	now      func() time.Time
}

// New returns the handlers.
func New(p Producer, q Queries, now func() time.Time) *Handlers {
	return &Handlers{producer: p, queries: q, now: now}
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

// IngestResult is the answer of the ingest endpoint.
type IngestResult struct {
	Success  bool                    `json:"success"`
	Accepted int                     `json:"accepted"`
	Rejected int                     `json:"rejected"`
	Error    string                  `json:"error,omitempty"`
	Code     string                  `json:"code,omitempty"`
	Errors   []requestlog.FieldError `json:"errors,omitempty"`
}

// ingest takes a JSON array of events. Valid events are produced even when
// others are not; then the answer is 400 naming each rejected event's
// index and field, with the accepted count.
func (h *Handlers) ingest(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		rest.WriteError(w, errcode.New(errcode.BadRequest, "Content-Type must be application/json"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxIngestBytes))
	if err != nil {
		var big *http.MaxBytesError
		if errors.As(err, &big) {
			rest.WriteError(w, errcode.New(errcode.TooLarge, fmt.Sprintf("request body is larger than %d bytes", big.Limit)))
			return
		}
		rest.Fail(w, r, err)
		return
	}
	var items []json.RawMessage
	if err := json.Unmarshal(body, &items); err != nil || items == nil {
		rest.WriteError(w, errcode.New(errcode.BadRequest, "request body must be a JSON array of request-log events"))
		return
	}
	if len(items) == 0 || len(items) > MaxIngestEvents {
		rest.WriteError(w, errcode.New(errcode.BadRequest, fmt.Sprintf("send 1 to %d events per request", MaxIngestEvents)))
		return
	}
	events := make([]requestlog.Event, 0, len(items))
	var problems []requestlog.FieldError
	now := h.now().UTC()
	for i, raw := range items {
		e, err := decodeEvent(raw)
		if err != nil {
			problems = append(problems, requestlog.FieldError{Index: i, Field: err.field, Message: err.msg})
			continue
		}
		e = requestlog.Normalize(e, now)
		if errs := requestlog.Check(i, e); len(errs) > 0 {
			problems = append(problems, errs...)
			continue
		}
		events = append(events, e)
	}
	if err := h.producer.Produce(r.Context(), events); err != nil {
		if errors.Is(err, requestlog.ErrUnavailable) {
			rest.Fail(w, r, &errcode.Error{Code: errcode.Unavailable, Message: "the request-log queue is unavailable, try again shortly", RetryAfter: time.Second, Err: err})
			return
		}
		rest.Fail(w, r, err)
		return
	}
	res := IngestResult{Success: len(problems) == 0, Accepted: len(events), Rejected: len(items) - len(events)}
	if len(problems) > 0 {
		res.Errors, res.Code = problems, "invalid"
		res.Error = fmt.Sprintf("%d of %d events rejected: %s", res.Rejected, len(items), problems[0].Error())
		rest.JSON(w, http.StatusBadRequest, res)
		return
	}
	rest.JSON(w, http.StatusAccepted, res)
}

type decodeError struct{ field, msg string }

// decodeEvent reads one array element strictly: unknown fields and wrong
// types are problems of that element only.
func decodeEvent(raw json.RawMessage) (requestlog.Event, *decodeError) {
	var e requestlog.Event
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		var typ *json.UnmarshalTypeError
		var tm *time.ParseError
		switch {
		case errors.As(err, &typ) && typ.Field != "":
			return e, &decodeError{typ.Field, "must be of type " + typ.Type.String()}
		case errors.As(err, &typ):
			return e, &decodeError{"", "must be a JSON object"}
		case errors.As(err, &tm):
			return e, &decodeError{"created_at", "must be an RFC 3339 date-time"}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return e, &decodeError{strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), "unknown field"}
		default:
			return e, &decodeError{"", "is not a valid event"}
		}
	}
	return e, nil
}

func (h *Handlers) requests(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
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
		Service: q.Get("service"), Method: q.Get("method"), Status: q.Get("status"), Page: page, PageSize: size,
		Hours: hours, ExcludeInternal: !internal,
	})
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, map[string]any{"results": results, "count": count})
}

func (h *Handlers) overview(w http.ResponseWriter, r *http.Request) {
	hours, err := requestlogview.ParseHours(r.URL.Query().Get("hours"))
	if err != nil {
		rest.Fail(w, r, err)
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
	hours, err := requestlogview.ParseHours(r.URL.Query().Get("hours"))
	if err != nil {
		rest.Fail(w, r, err)
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
	hours, err := requestlogview.ParseHours(r.URL.Query().Get("hours"))
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	m, err := h.queries.Methods(r.Context(), hours, r.URL.Query().Get("service"))
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, map[string]any{"methods": m})
}

// timeline is the per-minute series the monitoring page charts.
func (h *Handlers) timeline(w http.ResponseWriter, r *http.Request) {
	hours, err := requestlogview.ParseTimelineHours(r.URL.Query().Get("hours"))
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	tl, err := h.queries.Timeline(r.Context(), hours, r.URL.Query().Get("service"))
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, tl)
}
