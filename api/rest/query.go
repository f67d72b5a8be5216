package rest

import (
	"net/http"
	"net/url"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// messageBadQuery is the message of a query string Query refuses.
const messageBadQuery = "the query string is not valid URL encoding"

// Query parses r's query string strictly. r.URL.Query drops a pair that
// does not decode (service=%zz, or one split by a semicolon), so a filter
// would be lost unseen and the answer would cover more than was asked;
// here the whole query is refused with a bad_request instead.
func Query(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errcode.New(errcode.BadRequest, messageBadQuery)
	}
	return q, nil
}

// QueryOr400 is Query that answers a refused query string itself; ok
// reports whether the handler may go on.
func QueryOr400(w http.ResponseWriter, r *http.Request) (q url.Values, ok bool) {
	q, err := Query(r)
	if err != nil {
		Fail(w, r, err)
		return nil, false
	}
	return q, true
}
