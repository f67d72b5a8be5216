package process

import (
	"context"
	"time"

	"github.com/sethvargo/go-retry"
)

// Backoff is the one retry schedule of the Kafka code and the consumers
// built on it: first, doubling per attempt up to max, each wait spread by
// ±50% so that consumers which failed together (on each other's locks, or
// on one store going down) do not retry in step. A Backoff counts its own
// attempts: take a new one for each thing retried.
func Backoff(first, max time.Duration) retry.Backoff {
	return retry.WithCappedDuration(max, retry.WithJitterPercent(50, retry.NewExponential(first)))
}

// Wait sleeps for b's next delay, or less when ctx ends; it reports
// whether the whole wait passed.
func Wait(ctx context.Context, b retry.Backoff) bool {
	d, stop := b.Next()
	if stop {
		return false
	}
	return Sleep(ctx, d)
}
