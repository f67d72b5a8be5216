// Package commands is cfgd's write side. Every command handler has one
// shape, run by Execute: load the streams it needs from the event store and
// fold them (Fold, with one typed When handler per event type), decide, and
// append what it decided at the versions it read, starting again from the
// load when another writer got there first.
//
// The sub-packages otp, session and user each own the command handlers of
// one aggregate family. Two sub-packages hold no handlers: token (signing
// and checking the JWTs a handler hands out) and mail (delivering the
// e-mail the OTP request sends) are services the handlers call, kept
// beside them because nothing outside the write side decides with them.
package commands

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/store"
)

// MaxAttempts bounds how often a command starts again after a version
// conflict. An attempt is lost only when another command appended to a
// stream it read; the busiest case, the OTP verify, can lose at most
// otp.MaxAttempts counted guesses plus one verification on its code's
// stream, and a few more on the user and e-mail-claim streams, so twelve
// always suffices unless the resource is genuinely flooded (ErrBusy).
const MaxAttempts = 12

// ErrBusy is returned when a command kept losing the race for its stream:
// retrying shortly will work (errcode.Busy, retry after a second).
var ErrBusy = &errcode.Error{Code: errcode.Busy, Message: "too much concurrent activity, try again", RetryAfter: time.Second}

// Decision is what one attempt of a command decided.
type Decision[R any] struct {
	// Writes are appended together in one statement, each at the version
	// its stream was read at; none is a valid decision.
	Writes []store.Write
	// Result is returned once Writes committed.
	Result R
	// Err, when set, is returned instead of success once Writes committed:
	// a refusal that counts only if it was recorded, such as a wrong OTP
	// guess.
	Err error
}

// Execute runs a command: load reads and folds the state it decides on,
// decide turns that state into a Decision, and the decision's writes are
// appended. A version conflict means the state moved on, so the whole
// attempt starts again from load, at most MaxAttempts times; then ErrBusy.
// what names the command in a wrapped append error.
func Execute[S, R any](ctx context.Context, db store.DB, what string,
	load func(ctx context.Context) (S, error),
	decide func(ctx context.Context, s S) (Decision[R], error),
) (R, error) {
	return Retry(ctx, func(ctx context.Context) (R, error) {
		var zero R
		s, err := load(ctx)
		if err != nil {
			return zero, err
		}
		d, err := decide(ctx, s)
		if err != nil {
			return zero, err
		}
		if _, err := store.AppendMany(ctx, db, d.Writes...); err != nil {
			return zero, fmt.Errorf("%s: %w", what, err)
		}
		if d.Err != nil {
			return d.Result, d.Err
		}
		return d.Result, nil
	})
}

// Retry runs one attempt of a command until it ends with anything other
// than a version conflict, at most MaxAttempts times. Every attempt must
// start from a fresh load: a conflict means the stream moved on, so
// whatever was decided may no longer hold. Execute is Retry for the usual
// load, fold, decide, append shape.
func Retry[T any](ctx context.Context, attempt func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	for i := range MaxAttempts {
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
