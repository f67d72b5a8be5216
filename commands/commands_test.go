package commands_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

type attempts struct {
	code     string
	attempts int
	verified bool
}

var attemptsFold = commands.NewFold(
	commands.When(func(s *attempts, e identity.OTPIssued) { *s = attempts{code: e.CodeID} }),
	commands.When(func(s *attempts, e identity.OTPAttempted) {
		if e.CodeID == s.code {
			s.attempts = e.Attempt
		}
	}),
	commands.When(func(s *attempts, _ identity.OTPVerified) { s.verified = true }),
)

func env(t *testing.T, version int64, e events.Event) events.Envelope {
	t.Helper()
	out, err := events.New("otp-a@example.com", e, events.Metadata{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out.Version = version
	return out
}

func TestFoldDispatchesByType(t *testing.T) {
	tests := []struct {
		name    string
		envs    []events.Envelope
		want    attempts
		version int64
	}{
		{"empty", nil, attempts{}, 0},
		{"issued", []events.Envelope{env(t, 1, identity.OTPIssued{CodeID: "c1"})}, attempts{code: "c1"}, 1},
		{"attempts of the current code only", []events.Envelope{
			env(t, 1, identity.OTPIssued{CodeID: "c1"}),
			env(t, 2, identity.OTPAttempted{CodeID: "c1", Attempt: 1}),
			env(t, 3, identity.OTPIssued{CodeID: "c2"}),
			env(t, 4, identity.OTPAttempted{CodeID: "c1", Attempt: 2}),
			env(t, 5, identity.OTPAttempted{CodeID: "c2", Attempt: 1}),
		}, attempts{code: "c2", attempts: 1}, 5},
		{"types without a handler are skipped but counted in the version", []events.Envelope{
			env(t, 1, identity.OTPIssued{CodeID: "c1"}),
			env(t, 2, identity.OTPDeliveryFailed{CodeID: "c1"}),
			env(t, 3, identity.OTPVerified{CodeID: "c1"}),
			env(t, 4, identity.OTPDeliveryFailed{CodeID: "c1"}),
		}, attempts{code: "c1", verified: true}, 4},
	}
	for _, tc := range tests {
		var got attempts
		v, err := attemptsFold.Apply(&got, tc.envs)
		if err != nil || got != tc.want || v != tc.version {
			t.Errorf("%s: %+v v%d %v, want %+v v%d", tc.name, got, v, err, tc.want, tc.version)
		}
	}
	if !attemptsFold.Handles("otp.attempted") || attemptsFold.Handles("otp.delivery_failed") {
		t.Error("Handles")
	}
	bad := env(t, 2, identity.OTPAttempted{})
	bad.Data = []byte(`{"attempt":"three"}`)
	var s attempts
	if _, err := attemptsFold.Apply(&s, []events.Envelope{env(t, 1, identity.OTPIssued{}), bad}); err == nil || !strings.Contains(err.Error(), "otp.attempted") {
		t.Fatalf("a payload that does not decode: %v", err)
	}
}

func TestNewFoldRefusesTwoHandlersForOneType(t *testing.T) {
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "otp.issued") {
			t.Fatalf("panic %v", p)
		}
	}()
	commands.NewFold(
		commands.When(func(*attempts, identity.OTPIssued) {}),
		commands.When(func(*attempts, identity.OTPIssued) {}),
	)
}

// TestExecute runs commands against the real store: a lost race starts
// again from a fresh load, a refusal that must be recorded is returned
// only after its writes committed, and a command that always loses gives
// up with ErrBusy after MaxAttempts loads.
func TestExecute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	load := func(stream string, loads *atomic.Int32) func(context.Context) (int64, error) {
		return func(ctx context.Context) (int64, error) {
			loads.Add(1)
			return store.Version(ctx, pool, stream)
		}
	}
	appendOne := func(stream string, e events.Event, result int64, refusal error) func(context.Context, int64) (commands.Decision[int64], error) {
		return func(_ context.Context, v int64) (commands.Decision[int64], error) {
			env, err := events.New(stream, e, events.Metadata{}, time.Now())
			if err != nil {
				return commands.Decision[int64]{}, err
			}
			return commands.Decision[int64]{
				Writes: []store.Write{{Stream: stream, Expected: v, Events: []events.Envelope{env}}},
				Result: result, Err: refusal,
			}, nil
		}
	}

	t.Run("a lost race is retried from a fresh load", func(t *testing.T) {
		const stream = "otp-race@example.com"
		var loads atomic.Int32
		raced := false
		got, err := commands.Execute(ctx, pool, "test", load(stream, &loads), func(ctx context.Context, v int64) (commands.Decision[int64], error) {
			if !raced { // another writer gets there between load and append
				raced = true
				other, _ := events.New(stream, identity.OTPIssued{CodeID: "other"}, events.Metadata{}, time.Now())
				if _, err := store.Append(ctx, pool, stream, v, other); err != nil {
					t.Fatal(err)
				}
			}
			return appendOne(stream, identity.OTPIssued{CodeID: "mine"}, v+1, nil)(ctx, v)
		})
		if err != nil || got != 2 || loads.Load() != 2 {
			t.Fatalf("result %d, %v after %d loads; want version 2 after 2 loads", got, err, loads.Load())
		}
	})
	t.Run("a refusal is answered after its writes committed", func(t *testing.T) {
		const stream = "otp-refusal@example.com"
		var loads atomic.Int32
		refused := errors.New("refused")
		_, err := commands.Execute(ctx, pool, "test", load(stream, &loads), appendOne(stream, identity.OTPAttempted{CodeID: "c", Attempt: 1}, 0, refused))
		if !errors.Is(err, refused) {
			t.Fatalf("err %v", err)
		}
		if v, _ := store.Version(ctx, pool, stream); v != 1 {
			t.Fatalf("stream at v%d: the refusal's event was not stored", v)
		}
	})
	t.Run("a decision error appends nothing", func(t *testing.T) {
		const stream = "otp-error@example.com"
		var loads atomic.Int32
		boom := errors.New("boom")
		_, err := commands.Execute(ctx, pool, "test", load(stream, &loads), func(context.Context, int64) (commands.Decision[int64], error) {
			return commands.Decision[int64]{}, boom
		})
		if !errors.Is(err, boom) || loads.Load() != 1 {
			t.Fatalf("err %v after %d loads", err, loads.Load())
		}
		if v, _ := store.Version(ctx, pool, stream); v != 0 {
			t.Fatalf("stream at v%d", v)
		}
	})
	t.Run("always losing ends in ErrBusy", func(t *testing.T) {
		const stream = "otp-busy@example.com"
		var loads atomic.Int32
		_, err := commands.Execute(ctx, pool, "test", load(stream, &loads), func(ctx context.Context, v int64) (commands.Decision[int64], error) {
			other, _ := events.New(stream, identity.OTPIssued{CodeID: "other"}, events.Metadata{}, time.Now())
			if _, err := store.Append(ctx, pool, stream, v, other); err != nil {
				t.Fatal(err)
			}
			return appendOne(stream, identity.OTPIssued{CodeID: "mine"}, 0, nil)(ctx, v)
		})
		if !errors.Is(err, commands.ErrBusy) || loads.Load() != commands.MaxAttempts {
			t.Fatalf("err %v after %d loads, want ErrBusy after %d", err, loads.Load(), commands.MaxAttempts)
		}
	})
}
