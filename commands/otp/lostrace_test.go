package otp_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/commands/otp"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// raceDB lets a rival guess commit its miss just before the handler's
// first append reaches Postgres, so that append loses the version race,
// every time rather than when the scheduler happens to allow it.
type raceDB struct {
	store.DB
	rival func(ctx context.Context) error
	done  atomic.Bool
}

func (d *raceDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.HasPrefix(sql, "/* cfgd:append */") && d.done.CompareAndSwap(false, true) {
		if err := d.rival(ctx); err != nil {
			return nil, err
		}
	}
	return d.DB.Query(ctx, sql, args...)
}

// A wrong guess whose otp.attempted loses the version race to a rival
// guess is still counted: it is compared again on the fresh stream and
// recorded as the next attempt before it is answered, so the code's
// attempts are the rival's #1 and this guess's #2, and the right code is
// refused after one more miss.
func TestRefusedGuessThatLosesTheRaceIsCounted(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	email := "lost-race@example.com"
	res, err := r.request.Handle(ctx, otp.Request{Email: email})
	if err != nil {
		t.Fatal(err)
	}
	right := r.inbox.code(t, email)
	n, _ := strconv.Atoi(right)
	wrong := strconv.Itoa(100000 + (n+1)%900000)
	stream := identity.OTPStream(email)

	db := &raceDB{DB: r.pool, rival: func(ctx context.Context) error {
		v, err := store.Version(ctx, r.pool, stream)
		if err != nil {
			return err
		}
		miss, err := events.New(stream, identity.OTPAttempted{CodeID: res.CodeID, Attempt: 1}, events.Metadata{}, time.Now())
		if err != nil {
			return err
		}
		_, err = store.Append(ctx, r.pool, stream, v, miss)
		return err
	}}
	verify := otp.NewVerifyHandler(db, hasherFor(t), r.tokens, user.Sources{}, time.Now)
	if _, err := verify.Handle(ctx, otp.Verify{Email: email, Code: wrong}); !errors.Is(err, otp.ErrInvalidCode) {
		t.Fatalf("wrong guess: %v", err)
	}
	if !db.done.Load() {
		t.Fatal("the rival never ran: the guess appended nothing")
	}
	var attempts []int
	envs, err := store.Load(ctx, r.pool, stream)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range envs {
		if e, err := identity.Data[identity.OTPAttempted](env); err == nil && env.Type == (identity.OTPAttempted{}).EventType() && e.CodeID == res.CodeID {
			attempts = append(attempts, e.Attempt)
		}
	}
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("attempts recorded %v, want [1 2]: the guess that lost the race was not counted", attempts)
	}
	// Two misses counted: one more wrong guess spends the code.
	if _, err := r.verify.Handle(ctx, otp.Verify{Email: email, Code: wrong}); !errors.Is(err, otp.ErrInvalidCode) {
		t.Fatal(err)
	}
	if _, err := r.verify.Handle(ctx, otp.Verify{Email: email, Code: right}); !errors.Is(err, otp.ErrInvalidCode) {
		t.Fatalf("the right code after %d counted misses: %v", otp.MaxAttempts, err)
	}
}

// hasherFor is the rig's hasher (the same key), for a second handler.
func hasherFor(t *testing.T) *otp.Hasher {
	t.Helper()
	h, err := otp.NewHasher([]byte(strings.Repeat("h", 32)))
	if err != nil {
		t.Fatal(err)
	}
	return h
}
