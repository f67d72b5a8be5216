package process

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Retry reports each failure through Ready until fn succeeds; the caller
// marks itself ready again. A cancelled wait ends it with ctx's error.
func TestHealthRetry(t *testing.T) {
	t.Parallel()
	var h Health
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	if err := h.Ready(ctx); err != nil {
		t.Fatalf("new health: %v", err)
	}
	tries := 0
	err := h.Retry(ctx, log, "clickhouse", time.Millisecond*200, func(context.Context) error {
		if tries++; tries < 3 {
			if got := h.Ready(ctx); tries > 1 && (got == nil || !strings.Contains(got.Error(), "clickhouse: down")) {
				t.Errorf("try %d: ready = %v, want the last failure", tries, got)
			}
			return errors.New("down")
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("retry: %v after %d tries", err, tries)
	}
	if got := h.Ready(ctx); got == nil || got.Error() != "clickhouse: down" {
		t.Fatalf("ready after recovery, before Set(nil) = %v", got)
	}
	h.Set(nil)
	if err := h.Ready(ctx); err != nil {
		t.Fatalf("ready after Set(nil): %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	err = h.Retry(cctx, log, "kafka", time.Hour, func(context.Context) error {
		cancel()
		return errors.New("refused")
	})
	if !errors.Is(err, context.Canceled) || h.Ready(ctx) == nil {
		t.Fatalf("cancelled retry: %v, ready %v", err, h.Ready(ctx))
	}
	if Sleep(cctx, time.Hour) {
		t.Fatal("Sleep on a cancelled context waited the whole time")
	}
}
