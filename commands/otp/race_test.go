package otp_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/mail"
	"github.com/cfgd/cfgd/commands/otp"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// inbox is the mail provider's stand-in: it keeps the last message sent to
// each address.
type inbox struct {
	mu   sync.Mutex
	last map[string]mail.Message
}

func (b *inbox) Send(_ context.Context, m mail.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last[m.To] = m
	return nil
}

var codeRE = regexp.MustCompile(`\b\d{6}\b`)

func (b *inbox) code(t *testing.T, email string) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	c := codeRE.FindString(b.last[email].Text)
	if c == "" {
		t.Fatalf("no code mailed to %s", email)
	}
	return c
}

type rig struct {
	pool    *pgxpool.Pool
	inbox   *inbox
	request *otp.RequestHandler
	verify  *otp.VerifyHandler
	tokens  *token.Service
}

func newRig(t *testing.T) *rig {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16 // every guess of a race holds a connection at once
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	hasher, err := otp.NewHasher([]byte(strings.Repeat("h", 32)))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := otp.ParseTemplates()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := token.Load(token.HS256, strings.Repeat("s", 32), "")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := token.New(token.Config{Issuer: "i", Audience: "a", AccessTTL: time.Minute, RefreshTTL: time.Hour, WebTTL: time.Hour}, keys)
	if err != nil {
		t.Fatal(err)
	}
	box := &inbox{last: map[string]mail.Message{}}
	return &rig{
		pool: pool, inbox: box,
		request: otp.NewRequestHandler(pool, hasher, tpl, box, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil))),
		verify:  otp.NewVerifyHandler(pool, hasher, tokens, user.Sources{}, time.Now),
		tokens:  tokens,
	}
}

// TestRightGuessRacingWrongOnes races one right guess against eleven wrong
// ones for the same code, many times over, for an address that has no user
// yet and for one that has. Whatever the interleaving:
//
//   - the code's attempts in the stream are numbered 1, 2, 3... in order,
//     and otp.verified, if any, is the last of them and at most the third:
//     no code is accepted after its third counted attempt;
//   - the right guess succeeds exactly when otp.verified was stored;
//   - every wrong guess answered while the code was live was counted: a
//     code that was not verified has used up all its attempts (with eleven
//     wrong guesses there are always enough to do so), and the number of
//     otp.attempted events is what the answers imply.
//
// Writing otp.verified at events.AnyVersion instead of the version the
// code was read at lets the right guess commit after the third wrong one,
// and this test fails.
func TestRightGuessRacingWrongOnes(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	const wrongGuesses, rounds = 11, 12
	for _, existing := range []bool{false, true} {
		t.Run("existing user "+strconv.FormatBool(existing), func(t *testing.T) {
			for round := range rounds {
				email := "race-" + strconv.FormatBool(existing) + "-" + strconv.Itoa(round) + "@example.com"
				if existing {
					if _, err := r.request.Handle(ctx, otp.Request{Email: email}); err != nil {
						t.Fatal(err)
					}
					if _, err := r.verify.Handle(ctx, otp.Verify{Email: email, Code: r.inbox.code(t, email)}); err != nil {
						t.Fatal(err)
					}
				}
				res, err := r.request.Handle(ctx, otp.Request{Email: email})
				if err != nil {
					t.Fatal(err)
				}
				right := r.inbox.code(t, email)
				errs := make([]error, wrongGuesses+1)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range errs {
					guess := right
					if i > 0 {
						n, _ := strconv.Atoi(right)
						guess = strconv.Itoa(100000 + (n+i)%900000)
					}
					wg.Go(func() {
						<-start
						_, errs[i] = r.verify.Handle(ctx, otp.Verify{Email: email, Code: guess})
					})
				}
				close(start)
				wg.Wait()
				for i, err := range errs[1:] {
					if !errors.Is(err, otp.ErrInvalidCode) {
						t.Fatalf("round %d: wrong guess %d answered %v", round, i+1, err)
					}
				}
				if errs[0] != nil && !errors.Is(errs[0], otp.ErrInvalidCode) {
					t.Fatalf("round %d: right guess answered %v", round, errs[0])
				}
				checkAttempts(t, r.pool, email, res.CodeID, errs[0] == nil, round)
			}
		})
	}
}

// checkAttempts reads the otp stream and checks the attempt rules for
// codeID; accepted says whether the right guess was answered with success.
func checkAttempts(t *testing.T, db store.DB, email, codeID string, accepted bool, round int) {
	t.Helper()
	envs, err := store.Load(context.Background(), db, identity.OTPStream(email))
	if err != nil {
		t.Fatal(err)
	}
	var (
		counted  int
		verified bool
		trail    []string
	)
	for _, env := range envs {
		switch env.Type {
		case identity.OTPAttempted{}.EventType():
			e, err := identity.Data[identity.OTPAttempted](env)
			if err != nil || e.CodeID != codeID {
				continue
			}
			trail = append(trail, "miss#"+strconv.Itoa(e.Attempt))
			counted++
			if verified || e.Attempt != counted {
				t.Fatalf("round %d: attempts out of order: %v", round, trail)
			}
		case identity.OTPVerified{}.EventType():
			e, err := identity.Data[identity.OTPVerified](env)
			if err != nil || e.CodeID != codeID {
				continue
			}
			trail = append(trail, "verified#"+strconv.Itoa(e.Attempt))
			counted++
			if verified || e.Attempt != counted || counted > otp.MaxAttempts {
				t.Fatalf("round %d: a code accepted after its attempts ran out: %v", round, trail)
			}
			verified = true
		}
	}
	switch {
	case counted > otp.MaxAttempts:
		t.Fatalf("round %d: %d attempts counted, at most %d allowed: %v", round, counted, otp.MaxAttempts, trail)
	case accepted != verified:
		t.Fatalf("round %d: right guess accepted=%v but verified stored=%v: %v", round, accepted, verified, trail)
	case !verified && counted != otp.MaxAttempts:
		// The right guess was refused, so it found the code spent: eleven
		// wrong guesses must have been counted up to the limit.
		t.Fatalf("round %d: right guess refused with only %d attempts counted: %v", round, counted, trail)
	}
}
