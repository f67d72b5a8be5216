// Package commands is cfgd's write side. Each sub-package owns the command
// handlers of one aggregate family; a handler loads the streams it needs from
// the event store, folds them, decides, and appends with the expected
// version. This package holds what every handler shares.
package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cfgd/cfgd/events/store"
)

// ErrBusy is returned when a command kept losing the race for its stream.
// Callers answer it as 503: retrying later will work.
var ErrBusy = errors.New("too much concurrent activity on this resource, try again")

// Retry runs one attempt of a command until it ends with anything other than
// a version conflict, at most max times. Every attempt must start from a
// fresh load: a conflict means the stream moved on, so whatever was decided
// may no longer hold.
func Retry[T any](ctx context.Context, max int, attempt func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	for i := range max {
		res, err := attempt(ctx)
		if err == nil || !store.IsConflict(err) {
			return res, err
		}
		// A little jitter keeps the losers of one race from colliding again.
		d := time.Duration(1+i) * time.Duration(200+rand.IntN(800)) * time.Microsecond
		select {
		case <-ctx.Done():
			return zero, fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
		case <-time.After(d):
		}
	}
	return zero, ErrBusy
}

// ValidationError names each bad input field with a message safe to show.
type ValidationError struct {
	Fields map[string]string
}

func (e *ValidationError) Error() string {
	parts := make([]string, 0, len(e.Fields))
	for k, v := range e.Fields {
		parts = append(parts, k+": "+v)
	}
	return "invalid input: " + joinSorted(parts)
}

func joinSorted(parts []string) string {
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}
