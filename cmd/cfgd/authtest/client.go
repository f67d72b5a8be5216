package authtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/readmodels/checkpoints"
)

// Response is a decoded answer.
type Response struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    []byte
	Took   time.Duration
}

// Str returns a top-level string field.
func (r Response) Str(key string) string {
	s, _ := r.Body[key].(string)
	return s
}

// Obj returns a top-level object field.
func (r Response) Obj(key string) map[string]any {
	m, _ := r.Body[key].(map[string]any)
	return m
}

// Field returns the message for one field of a 400 field-error answer.
func (r Response) Field(name string) string {
	f, _ := r.Body["fields"].(map[string]any)
	s, _ := f[name].(string)
	return s
}

// client keeps enough idle connections for parallel tests and benchmarks.
var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}

// HTTPClient is the client Do uses.
func HTTPClient() *http.Client { return client }

// Do sends a request; body is JSON-encoded unless it is a string or nil.
// headers are name, value pairs.
func (e *Env) Do(t testing.TB, method, path string, body any, headers ...string) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := Response{Status: resp.StatusCode, Header: resp.Header, Raw: raw, Took: time.Since(start)}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out.Body); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %v: %s", method, path, err, raw)
		}
	}
	return out
}

// RequestCode asks for a code for email and returns it from the captured
// e-mail.
func (e *Env) RequestCode(t testing.TB, email string, extra ...string) string {
	t.Helper()
	body := map[string]any{"identifier": email, "channel": "email"}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i]] = extra[i+1]
	}
	r := e.Do(t, http.MethodPost, "/api/auth/otp/request/", body)
	if r.Status != http.StatusOK {
		t.Fatalf("otp request for %s: %d %s", email, r.Status, r.Raw)
	}
	m, ok := e.Mail.Last(email)
	if !ok || m.Code() == "" {
		t.Fatalf("no code e-mailed to %s", email)
	}
	return m.Code()
}

// Verify submits a code.
func (e *Env) Verify(t testing.TB, email, code string, extra ...string) Response {
	t.Helper()
	body := map[string]any{"identifier": email, "otp_code": code}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i]] = extra[i+1]
	}
	return e.Do(t, http.MethodPost, "/api/auth/otp/verify/", body)
}

// Session is a signed-in API user.
type Session struct {
	UserID  int64
	Access  string
	Refresh string
}

// SignIn requests and verifies a code for email.
func (e *Env) SignIn(t testing.TB, email string, extra ...string) Session {
	t.Helper()
	code := e.RequestCode(t, email)
	r := e.Verify(t, email, code, extra...)
	if r.Status != http.StatusOK {
		t.Fatalf("verify for %s: %d %s", email, r.Status, r.Raw)
	}
	tokens := r.Obj("tokens")
	u := r.Obj("user")
	id, _ := u["id"].(float64)
	return Session{UserID: int64(id), Access: tokens["access"].(string), Refresh: tokens["refresh"].(string)}
}

// Bearer is the Authorization header pair for an access token.
func Bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

// EventCount counts the events of one type in stream.
func (e *Env) EventCount(t testing.TB, stream, typ string) int {
	t.Helper()
	var n int
	if err := e.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE stream_id = $1 AND type = $2`, stream, typ).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// WaitProjected waits until projection has applied stream as far as the
// event store holds it.
func (e *Env) WaitProjected(t testing.TB, projection, stream string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := store.Version(ctx, e.Pool, stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoints.Wait(ctx, e.Pool, projection, stream, v); err != nil {
		t.Fatal(err)
	}
}
