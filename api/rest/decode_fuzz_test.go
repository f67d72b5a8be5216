package rest

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// fuzzBody has the shapes the API decodes: scalars, an optional nested
// object, a list and a map.
type fuzzBody struct {
	A string         `json:"a"`
	B int            `json:"b"`
	C *fuzzNested    `json:"c"`
	M map[string]int `json:"m"`
}

type fuzzNested struct {
	D []string `json:"d"`
	E *bool    `json:"e"`
}

// FuzzDecode: whatever a client sends, Decode either fills the struct with
// exactly what the body says, or refuses it with a 4xx and a message; it
// never panics.
//
// Properties checked on success: the body was valid UTF-8 sent as
// application/json, and re-encoding the result gives, key by key, the same
// JSON values as the body (nothing dropped, merged, case-folded or
// replaced by U+FFFD), and decodes again to an equal value.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"a":"x","b":1}`, `{"a":`, ``, `[]`, `{"a":"x"}{}`, `{"c":1}`, `null`, `{"b":1e400}`,
		`{"a":"x","a":"y"}`, `{"A":"x"}`, `{"a":"\ud800"}`, `{"a":"\ud83d\ude00"}`, "{\"a\":\"\xff\"}",
		`{"c":{"d":["x","y"],"e":true}}`, `{"m":{"k":1,"k":2}}`, `{"c":{"D":[]}}`, `{"a":"\\ud800"}`,
	} {
		f.Add(s, "application/json")
	}
	f.Add(`{"a":"x"}`, "application/json; charset=utf-8")
	f.Add(`{"a":"x"}`, "application/json-evil")
	f.Add(`{"a":"x"}`, "text/plain")
	f.Fuzz(func(t *testing.T, body, ct string) {
		var dst fuzzBody
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", ct)
		err := Decode(httptest.NewRecorder(), r, &dst)
		if err != nil {
			var de *errcode.Error
			if !errors.As(err, &de) || de.Code.HTTPStatus() < 400 || de.Code.HTTPStatus() > 499 || de.Message == "" {
				t.Fatalf("refusal %#v is not a 4xx with a message", err)
			}
			return
		}
		if mt, _, perr := mime.ParseMediaType(ct); perr != nil || mt != "application/json" {
			t.Fatalf("accepted Content-Type %q", ct)
		}
		if !utf8.ValidString(body) {
			t.Fatalf("accepted invalid UTF-8 %q", body)
		}
		var sent map[string]any
		if err := json.Unmarshal([]byte(body), &sent); err != nil {
			t.Fatalf("accepted %q, which is not a JSON object: %v", body, err)
		}
		re, err := json.Marshal(dst)
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := json.Unmarshal(re, &back); err != nil {
			t.Fatal(err)
		}
		if !same(sent, back) {
			t.Fatalf("body %q re-encodes as %s", body, re)
		}
		var again fuzzBody
		r = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(re)))
		r.Header.Set("Content-Type", "application/json")
		if err := Decode(httptest.NewRecorder(), r, &again); err != nil || !reflect.DeepEqual(again, dst) {
			t.Fatalf("re-encoded %s decodes to %#v (%v), want %#v", re, again, err, dst)
		}
	})
}

// same tells whether what the client sent and what the decoded value
// re-encodes to are the same JSON, allowing only what encoding/json may
// legitimately change on a round trip: a key left out or sent as null comes
// back as its zero value, and an empty list as null (a Go nil slice).
func same(sent, back any) bool {
	switch s := sent.(type) {
	case nil:
		return back == nil || back == "" || back == 0.0 || back == false || reflect.DeepEqual(back, map[string]any{})
	case map[string]any:
		b, ok := back.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range s {
			if !same(v, b[k]) {
				return false
			}
		}
		return true
	case []any:
		b, _ := back.([]any)
		if len(s) != len(b) {
			return false
		}
		for i := range s {
			if !same(s[i], b[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(sent, back)
}
