package process

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Health is a background runner's readiness, read by its Check: the
// reason it is not keeping up (a dependency it waits for), or nil.
type Health struct{ err atomic.Pointer[error] }

// Set records err (nil: keeping up).
func (h *Health) Set(err error) {
	if err == nil {
		h.err.Store(nil)
		return
	}
	h.err.Store(&err)
}

// Ready is the Check: the recorded reason, or nil.
func (h *Health) Ready(context.Context) error {
	if p := h.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Retry runs fn until it succeeds or ctx ends, waiting between attempts
// with Backoff from 100 ms up to maxBackoff. Each failure is
// recorded in h as "what: err" and logged, so a dependency that is down
// shows on /readyz instead of stopping the runner. It returns ctx's error
// when ctx ends first.
func (h *Health) Retry(ctx context.Context, log *slog.Logger, what string, maxBackoff time.Duration, fn func(context.Context) error) error {
	bo := Backoff(100*time.Millisecond, maxBackoff)
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		h.Set(fmt.Errorf("%s: %w", what, err))
		d, _ := bo.Next()
		log.WarnContext(ctx, "waiting for a dependency", "for", what, "err", err, "retry_in", d.String())
		if !Sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// Sleep waits d, or less when ctx ends: it reports whether the whole
// wait passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
