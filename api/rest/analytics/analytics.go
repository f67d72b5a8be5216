// Package analytics serves the staff-only registration-source analytics
// (docs/api.md, registration-source analytics) from readmodels/identity.
package analytics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/readmodels/identityview"
)

// Paths.
const (
	PathTopSources = "/api/analytics/sources/top/"
	PathLinks      = "/api/analytics/sources/links/"
)

// Window limits of the days parameter.
const (
	DefaultDays = 30
	MaxDays     = 3650
)

// Mount adds the endpoints behind staff.
func Mount(r *mux.Router, staff mux.MiddlewareFunc, db identityview.DB, now func() time.Time) {
	h := &handler{db: db, now: now}
	r.Handle(PathTopSources, staff(http.HandlerFunc(h.top))).Methods(http.MethodGet, http.MethodHead).Name("analytics:top-sources")
	r.Handle(PathLinks, staff(http.HandlerFunc(h.links))).Methods(http.MethodGet, http.MethodHead).Name("analytics:source-links")
}

type handler struct {
	db  identityview.DB
	now func() time.Time
}

// TopResponse ranks sources by linked users.
type TopResponse struct {
	Sources []identityview.SourceCount `json:"sources"`
	Count   int                        `json:"count"`
}

func (h *handler) top(w http.ResponseWriter, r *http.Request) {
	out, err := identityview.TopSources(r.Context(), h.db)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	if out == nil {
		out = []identityview.SourceCount{}
	}
	rest.JSON(w, http.StatusOK, TopResponse{Sources: out, Count: len(out)})
}

// LinksResponse groups the links of a window by source URL.
type LinksResponse struct {
	Days    int                      `json:"days"`
	Since   time.Time                `json:"since"`
	Sources []identityview.LinkCount `json:"sources"`
	Total   int64                    `json:"total"`
}

func (h *handler) links(w http.ResponseWriter, r *http.Request) {
	q, ok := rest.QueryOr400(w, r)
	if !ok {
		return
	}
	days := DefaultDays
	if v := q.Get("days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxDays {
			rest.WriteError(w, errcode.Fields(map[string]string{"days": "must be a whole number from 1 to " + strconv.Itoa(MaxDays)}))
			return
		}
		days = n
	}
	since := h.now().UTC().Add(-time.Duration(days) * 24 * time.Hour)
	out, err := identityview.LinksSince(r.Context(), h.db, since)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	if out == nil {
		out = []identityview.LinkCount{}
	}
	var total int64
	for _, c := range out {
		total += c.Links
	}
	rest.JSON(w, http.StatusOK, LinksResponse{Days: days, Since: since, Sources: out, Total: total})
}
