package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzDecode: whatever a client sends, Decode either fills the struct or
// returns a message; it never panics.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"a":"x","b":1}`, `{"a":`, ``, `[]`, `{"a":"x"}{}`, `{"c":1}`, `null`, `{"b":1e400}`} {
		f.Add(s, "application/json")
	}
	f.Fuzz(func(t *testing.T, body, ct string) {
		var dst struct {
			A string `json:"a"`
			B int    `json:"b"`
		}
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", ct)
		err := Decode(httptest.NewRecorder(), r, &dst)
		if err != nil && err.Error() == "" {
			t.Fatal("empty error message")
		}
	})
}
