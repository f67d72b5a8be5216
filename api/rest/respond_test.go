package rest

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/deploy/errcode"
)

type strictBody struct {
	Identifier string  `json:"identifier"`
	OTPCode    string  `json:"otp_code"`
	Nested     *nested `json:"nested"`
	Embedded
}

type nested struct {
	Name string `json:"name"`
}

type Embedded struct {
	Extra string `json:"extra"`
}

func TestDecodeIsStrict(t *testing.T) {
	const ok = `{"identifier":"a@example.com"}`
	tests := []struct {
		name, ct, body string
		status         int // 0: accepted
		msg            string
	}{
		{"plain", "application/json", ok, 0, ""},
		{"charset utf-8", "application/json; charset=utf-8", ok, 0, ""},
		{"charset UTF-8 quoted", `application/json; charset="UTF-8"`, ok, 0, ""},
		{"upper-case type", "Application/JSON", ok, 0, ""},
		{"promoted field", "application/json", `{"extra":"x"}`, 0, ""},
		{"nested", "application/json", `{"nested":{"name":"x"}}`, 0, ""},
		{"escaped pair", "application/json", `{"identifier":"\ud83d\ude00 \\ud800 \u00e9"}`, 0, ""},

		{"no content type", "", ok, 415, "Content-Type must be application/json"},
		{"text/plain", "text/plain", ok, 415, "Content-Type must be application/json"},
		{"json-evil", "application/json-evil", ok, 415, "Content-Type must be application/json"},
		{"json prefix", "application/jsonx; charset=utf-8", ok, 415, "Content-Type must be application/json"},
		{"form", "application/x-www-form-urlencoded", ok, 415, "Content-Type must be application/json"},
		{"bad parameters", "application/json; =", ok, 415, "Content-Type must be application/json"},
		{"latin-1", "application/json; charset=iso-8859-1", ok, 415, "the only charset accepted is utf-8"},

		{"duplicate key", "application/json", `{"identifier":"a@example.com","identifier":"b@example.com"}`, 400, `duplicate key "identifier"`},
		{"duplicate nested key", "application/json", `{"nested":{"name":"a","name":"b"}}`, 400, `duplicate key "nested.name"`},
		{"case-insensitive match", "application/json", `{"Identifier":"a@example.com"}`, 400, `unknown field "Identifier" (field names are case-sensitive: did you mean "identifier"?)`},
		{"case next to exact", "application/json", `{"identifier":"a@example.com","IDENTIFIER":"b@example.com"}`, 400, `unknown field "IDENTIFIER" (field names are case-sensitive: did you mean "identifier"?)`},
		{"nested case", "application/json", `{"nested":{"NAME":"x"}}`, 400, `unknown field "nested.NAME" (field names are case-sensitive: did you mean "name"?)`},
		{"invalid UTF-8 in a value", "application/json", "{\"identifier\":\"a\xff@example.com\"}", 400, "request body is not valid UTF-8"},
		{"invalid UTF-8 in a key", "application/json", "{\"identifi\xc3er\":\"a\"}", 400, "request body is not valid UTF-8"},
		{"overlong encoding", "application/json", "{\"identifier\":\"\xc0\xaf\"}", 400, "request body is not valid UTF-8"},
		{"lone high surrogate", "application/json", `{"identifier":"\ud800"}`, 400, "request body is not valid UTF-8: it escapes an unpaired surrogate"},
		{"lone low surrogate", "application/json", `{"identifier":"x\udc00"}`, 400, "request body is not valid UTF-8: it escapes an unpaired surrogate"},
		{"reversed pair", "application/json", `{"identifier":"\ude00\ud83d"}`, 400, "request body is not valid UTF-8: it escapes an unpaired surrogate"},
		{"surrogate in a key", "application/json", `{"\ud800":"x"}`, 400, "request body is not valid UTF-8: it escapes an unpaired surrogate"},
		{"unknown", "application/json", `{"nope":1}`, 400, `unknown field "nope"`},
		{"trailing", "application/json", ok + `{}`, 400, "request body must hold a single JSON object"},
		{"empty", "application/json", ``, 400, "request body is empty"},
		{"array", "application/json", `[]`, 400, "request body must be a JSON object"},
		{"too big", "application/json", `{"identifier":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, 400, "request body is larger than 1048576 bytes"},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		var dst strictBody
		err := Decode(httptest.NewRecorder(), r, &dst)
		var de *errcode.Error
		switch {
		case tc.status == 0 && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.status == 0:
		case !errors.As(err, &de) || de.Code.HTTPStatus() != tc.status || de.Message != tc.msg:
			t.Errorf("%s: got %#v, want %d %q", tc.name, err, tc.status, tc.msg)
		}
	}
}

func TestDecodeOr400AnswersTheStatus(t *testing.T) {
	tests := []struct {
		ct, body string
		status   int
	}{
		{"text/plain", `{}`, http.StatusUnsupportedMediaType},
		{"application/json", `{"a":1,"a":2}`, http.StatusBadRequest},
		{"application/json", `{}`, http.StatusOK},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
		r.Header.Set("Content-Type", tc.ct)
		w := httptest.NewRecorder()
		var dst struct {
			A int `json:"a"`
		}
		if DecodeOr400(w, r, &dst) {
			w.WriteHeader(http.StatusOK)
		}
		if w.Code != tc.status {
			t.Errorf("%s %s: %d, want %d (%s)", tc.ct, tc.body, w.Code, tc.status, w.Body)
		}
	}
}

func TestEveryResponseIsNosniff(t *testing.T) {
	r := mux.NewRouter()
	obs := Observe(quiet(), nil)
	r.NotFoundHandler = obs(NotFound())
	r.MethodNotAllowedHandler = obs(MethodNotAllowed())
	r.Use(obs)
	r.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { JSON(w, http.StatusOK, map[string]bool{"ok": true}) }).Methods(http.MethodGet)
	r.HandleFunc("/raw", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<b>hi</b>")) }).Methods(http.MethodGet)
	r.HandleFunc("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") }).Methods(http.MethodGet)
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/ok", 200}, {http.MethodGet, "/raw", 200}, {http.MethodGet, "/panic", 500},
		{http.MethodGet, "/nowhere", 404}, {http.MethodPost, "/ok", 405},
	} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
		if w.Code != tc.status || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: %d, X-Content-Type-Options %q", tc.method, tc.path, w.Code, w.Header().Get("X-Content-Type-Options"))
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A method outside the known set is one label value, however many and
// however long the methods a client invents: 50 requests with 100 KB
// methods once took /metrics from 179 KB to 75 MB.
func TestUnknownMethodsShareOneLabel(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	obs := Observe(quiet(), m)
	r.NotFoundHandler = obs(NotFound())
	r.MethodNotAllowedHandler = obs(MethodNotAllowed())
	r.Use(obs)
	r.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { JSON(w, http.StatusOK, nil) }).Methods(http.MethodGet)
	long := strings.Repeat("X", 100<<10)
	for i := range 50 {
		for _, path := range []string{"/ok", "/nowhere"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Method = long + strconv.Itoa(i)
			r.ServeHTTP(httptest.NewRecorder(), req)
		}
	}
	for _, method := range []string{http.MethodGet, "get", http.MethodTrace} {
		req := httptest.NewRequest(http.MethodGet, "/ok", nil)
		req.Method = method
		r.ServeHTTP(httptest.NewRecorder(), req)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "method" {
					methods[l.GetValue()] = true
				}
			}
		}
	}
	want := map[string]bool{"other": true, http.MethodGet: true, http.MethodTrace: true}
	if !maps.Equal(methods, want) {
		t.Errorf("method labels %v, want %v", slices.Sorted(maps.Keys(methods)), slices.Sorted(maps.Keys(want)))
	}
}
