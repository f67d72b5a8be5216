package rest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cfgd/cfgd/commands"
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
