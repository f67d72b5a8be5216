package grpcadmin

import (
	"errors"
	"maps"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
)

func mountKeys(r *mux.Router, h *handler) {
	get := []string{http.MethodGet, http.MethodHead}
	// stats/ before {id}/, which would otherwise take it.
	r.Handle(PathKeyStats, h.Staff(http.HandlerFunc(h.keyStats))).Methods(get...).Name("grpc:api-key-stats")
	r.Handle(PathKeys, h.Staff(http.HandlerFunc(h.listKeys))).Methods(get...).Name("grpc:api-keys")
	r.Handle(PathKey, h.Staff(http.HandlerFunc(h.getKey))).Methods(get...).Name("grpc:api-key")
}

// KeyList is a page of keys.
type KeyList struct {
	Results  []apikeyview.Key `json:"results"`
	Count    int64            `json:"count"`
	Next     *string          `json:"next"`
	Previous *string          `json:"previous"`
}

func (h *handler) listKeys(w http.ResponseWriter, r *http.Request) {
	q, ok := rest.QueryOr400(w, r)
	if !ok {
		return
	}
	fields := map[string]string{}
	var f apikeyview.Filter
	if v, ok := q["is_active"]; ok {
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			fields["is_active"] = "must be true or false"
		} else {
			f.IsActive = &b
		}
	}
	if v, ok := q["key_type"]; ok {
		if !apikey.ValidType(v[0]) {
			fields["key_type"] = "must be one of service, cli, webhook, internal, development"
		} else {
			f.KeyType = v[0]
		}
	}
	if v, ok := q["user_id"]; ok {
		id, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || id < 1 {
			fields["user_id"] = "must be a positive whole number"
		} else {
			f.UserID = &id
		}
	}
	page := intParam(q, "page", 1, 1, 1<<30, fields, "must be a whole number of at least 1")
	size := intParam(q, "page_size", apikeyview.DefaultPageSize, 1, apikeyview.MaxPageSize, fields,
		"must be a whole number from 1 to "+strconv.Itoa(apikeyview.MaxPageSize))
	if len(fields) > 0 {
		rest.WriteError(w, errcode.Fields(fields))
		return
	}
	keys, count, err := h.Keys.List(r.Context(), f, apikeyview.Page{Number: page, Size: size})
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	out := KeyList{Results: keys, Count: count}
	if int64(page*size) < count {
		out.Next = pageLink(r.URL.Path, q, page+1)
	}
	if page > 1 {
		// A page past the end links back to the last one that has rows.
		prev := min(page-1, max(1, int((count+int64(size)-1)/int64(size))))
		out.Previous = pageLink(r.URL.Path, q, prev)
	}
	rest.JSON(w, http.StatusOK, out)
}

func intParam(q url.Values, name string, def, lo, hi int, fields map[string]string, msg string) int {
	v, ok := q[name]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n < lo || n > hi {
		fields[name] = msg
		return def
	}
	return n
}

// pageLink is the request's own path and query q with another page.
func pageLink(path string, q url.Values, page int) *string {
	q = maps.Clone(q)
	q.Set("page", strconv.Itoa(page))
	s := path + "?" + q.Encode()
	return &s
}

func (h *handler) getKey(w http.ResponseWriter, r *http.Request) {
	id, ok := keyID(w, r)
	if !ok {
		return
	}
	k, err := h.Keys.Get(r.Context(), id)
	if errors.Is(err, apikeyview.ErrNotFound) {
		rest.WriteError(w, errcode.New(errcode.NotFound, "API key not found"))
		return
	}
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, k)
}

// keyID reads {id}; anything but a positive id is an unknown key.
func keyID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(mux.Vars(r)["id"], 10, 64)
	if err != nil || id < 1 {
		rest.WriteError(w, errcode.New(errcode.NotFound, "API key not found"))
		return 0, false
	}
	return id, true
}

func (h *handler) keyStats(w http.ResponseWriter, r *http.Request) {
	s, err := h.Keys.Stats(r.Context())
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, s)
}
