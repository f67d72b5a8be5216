package monitor

import (
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// mountPage adds the staff endpoints the monitoring page asks its next
// questions with: latency percentiles over time, the breakdowns by caller
// and by status code, and one request in full. They leave cfgd's own
// health and reflection traffic out unless include_internal=true.
func (h *Handlers) mountPage(r *mux.Router, staff mux.MiddlewareFunc) {
	r.Handle("/api/grpc/monitor/latency/", staff(http.HandlerFunc(h.latency))).Methods(http.MethodGet)
	r.Handle("/api/grpc/monitor/callers/", staff(http.HandlerFunc(h.callers))).Methods(http.MethodGet)
	r.Handle("/api/grpc/monitor/status-codes/", staff(http.HandlerFunc(h.statusCodes))).Methods(http.MethodGet)
	r.Handle("/api/grpc/monitor/requests/{id}/", staff(http.HandlerFunc(h.request))).Methods(http.MethodGet)
}

// latency is the per-bucket p50/p95/p99 series the page charts.
func (h *Handlers) latency(w http.ResponseWriter, r *http.Request) {
	q, ok := rest.QueryOr400(w, r)
	if !ok {
		return
	}
	hours, err1 := requestlogview.ParseTimelineHours(q.Get("hours"))
	internal, err2 := requestlogview.ParseIncludeInternal(q.Get("include_internal"), false)
	if err := errcode.Join(err1, err2); err != nil {
		rest.Fail(w, r, err)
		return
	}
	l, err := h.queries.Latency(r.Context(), requestlogview.SeriesFilter{Hours: hours, Service: q.Get("service"), IncludeInternal: internal})
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, l)
}

// breakdownFilter reads hours (default 24), service, include_internal
// (default false) and limit from r's query string.
func breakdownFilter(r *http.Request) (requestlogview.BreakdownFilter, error) {
	q, err := rest.Query(r)
	if err != nil {
		return requestlogview.BreakdownFilter{}, err
	}
	hours, err1 := requestlogview.ParseHours(q.Get("hours"))
	internal, err2 := requestlogview.ParseIncludeInternal(q.Get("include_internal"), false)
	limit, err3 := requestlogview.ParseLimit(q.Get("limit"))
	return requestlogview.BreakdownFilter{Hours: hours, Service: q.Get("service"), IncludeInternal: internal, Limit: limit},
		errcode.Join(err1, err2, err3)
}

func (h *Handlers) callers(w http.ResponseWriter, r *http.Request) {
	f, err := breakdownFilter(r)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	c, err := h.queries.Callers(r.Context(), f)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, map[string]any{"callers": c})
}

func (h *Handlers) statusCodes(w http.ResponseWriter, r *http.Request) {
	f, err := breakdownFilter(r)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	c, err := h.queries.StatusCodes(r.Context(), f)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, map[string]any{"status_codes": c})
}

// request is one request log in full, by the id the list gives.
func (h *Handlers) request(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(mux.Vars(r)["id"], 10, 64)
	if err != nil {
		rest.Fail(w, r, errcode.Field("id", "must be an integer from 0 to 2^64-1"))
		return
	}
	rec, err := h.queries.Request(r.Context(), id)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, rec)
}
