package rest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/store"
)

func TestFailMapsErrorsToStatuses(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"busy", fmt.Errorf("verify: %w", commands.ErrBusy), http.StatusServiceUnavailable},
		{"deadline", context.DeadlineExceeded, http.StatusServiceUnavailable},
		{"event too large", fmt.Errorf("append: %w", &store.TooLargeError{Stream: "user-1", Type: "user.profile_updated", Bytes: 2 << 20, Max: 900 << 10}), http.StatusRequestEntityTooLarge},
		{"anything else", errors.New("boom"), http.StatusInternalServerError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			Fail(w, httptest.NewRequest(http.MethodPost, "/x", nil), tc.err)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d", w.Code, tc.want)
			}
		})
	}
}

// TestEveryCodeAnswersItsStatusAndBody walks every code through the HTTP
// mapping: the status of errcode's table and the body clients parse today,
// byte for byte.
func TestEveryCodeAnswersItsStatusAndBody(t *testing.T) {
	for _, code := range errcode.Codes() {
		t.Run(string(code), func(t *testing.T) {
			w := httptest.NewRecorder()
			WriteError(w, errcode.New(code, "what went wrong"))
			want := `{"success":false,"error":"what went wrong","code":"` + string(code) + `"}` + "\n"
			if w.Code != code.HTTPStatus() || w.Body.String() != want {
				t.Fatalf("%d %s, want %d %s", w.Code, w.Body, code.HTTPStatus(), want)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			if ra := w.Header().Get("Retry-After"); ra != "" {
				t.Fatalf("Retry-After %q without a retry hint", ra)
			}
		})
	}
}

func TestFieldErrorsAndRetryAfter(t *testing.T) {
	tests := []struct {
		name       string
		err        *errcode.Error
		status     int
		body       string
		retryAfter string
	}{
		{"fields", errcode.Fields(map[string]string{"name": "is required", "key_type": "is unknown"}), 400,
			`{"success":false,"error":"invalid input","code":"invalid","fields":{"key_type":"is unknown","name":"is required"}}`, ""},
		{"rate limited rounds up", errcode.RetryLater("Too many requests", 1100*time.Millisecond), 429,
			`{"success":false,"error":"Too many requests","code":"rate_limited"}`, "2"},
		{"rate limited at least a second", errcode.RetryLater("Too many requests", time.Millisecond), 429,
			`{"success":false,"error":"Too many requests","code":"rate_limited"}`, "1"},
		{"busy", commands.ErrBusy, 503,
			`{"success":false,"error":"too much concurrent activity, try again","code":"busy"}`, "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			WriteError(w, tc.err)
			if w.Code != tc.status || w.Body.String() != tc.body+"\n" || w.Header().Get("Retry-After") != tc.retryAfter {
				t.Fatalf("%d %s Retry-After %q, want %d %s %q", w.Code, w.Body, w.Header().Get("Retry-After"), tc.status, tc.body, tc.retryAfter)
			}
		})
	}
}

func TestFailHidesWhatIsNotForTheClient(t *testing.T) {
	tests := []struct {
		name string
		err  error
		body string
	}{
		{"internal", errors.New("pq: relation secret_table"), `{"success":false,"error":"internal error","code":"internal"}`},
		{"dependency down", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused 10.0.0.7:5432")}, `{"success":false,"error":"a backing service is unavailable, try again shortly","code":"unavailable"}`},
		{"event too large", &store.TooLargeError{Stream: "user-1", Type: "user.profile_updated", Bytes: 2 << 20, Max: 900 << 10}, `{"success":false,"error":"the request would record more data than cfgd accepts in one event","code":"too_large"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			Fail(w, httptest.NewRequest(http.MethodGet, "/x", nil), tc.err)
			if w.Body.String() != tc.body+"\n" {
				t.Fatalf("%s, want %s", w.Body, tc.body)
			}
		})
	}
}

func TestFailOnAGoneClientIs499(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := httptest.NewRecorder()
	Fail(w, httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx), errcode.New(errcode.NotFound, "gone"))
	if w.Code != errcode.StatusClientClosed {
		t.Fatalf("%d, want 499", w.Code)
	}
}
