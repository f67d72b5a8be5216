package rest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"testing"
)

func TestQueryRefusesWhatDoesNotDecode(t *testing.T) {
	tests := []struct {
		raw  string
		want url.Values // nil: refused
	}{
		{"", url.Values{}},
		{"service=a.b&hours=24", url.Values{"service": {"a.b"}, "hours": {"24"}}},
		{"service=a%2Fb+c&service=d", url.Values{"service": {"a/b c", "d"}}},
		{"flag", url.Values{"flag": {""}}},
		{"service=%zz", nil},
		{"hours=1&service=%zz", nil},
		{"%zz=1", nil},
		{"service=a%", nil},
		{"service=a%2", nil},
		{"hours=1;service=a", nil},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodGet, "/x/", nil)
		r.URL.RawQuery = tc.raw
		q, err := Query(r)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%q: %v, want refused", tc.raw, q)
			}
		} else if err != nil || !reflect.DeepEqual(q, tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.raw, q, err, tc.want)
		}

		// QueryOr400 answers the refusal with the error shape, and lets a
		// valid query through.
		w := httptest.NewRecorder()
		if _, ok := QueryOr400(w, r); ok != (tc.want != nil) {
			t.Errorf("%q: ok %v", tc.raw, ok)
		}
		if tc.want != nil {
			if w.Body.Len() != 0 {
				t.Errorf("%q: answered %d %s for a valid query", tc.raw, w.Code, w.Body)
			}
			continue
		}
		var body ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusBadRequest ||
			!reflect.DeepEqual(body, ErrorBody{Error: messageBadQuery, Code: "bad_request"}) {
			t.Errorf("%q: %d %s, want 400 bad_request", tc.raw, w.Code, w.Body)
		}
	}
}
