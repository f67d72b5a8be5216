package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/cmd/internal/rig"
)

// signer runs OTP sign-ins of fresh addresses (request a code, read it
// from the mailbox, verify it) and keeps those that got their tokens.
type signer struct {
	c    *cfgd
	mail *mailbox

	mu     sync.Mutex
	signed map[string]signedIn // by e-mail
}

type signedIn struct {
	userID int64
	access string
}

func newSigner(c *cfgd, m *mailbox) *signer {
	return &signer{c: c, mail: m, signed: map[string]signedIn{}}
}

func (s *signer) run(ctx context.Context, name string, workers int, pause time.Duration) (wait func()) {
	return load(ctx, workers, pause, func(ctx context.Context, w, seq int) bool {
		return s.signIn(ctx, fmt.Sprintf("%s-%d-%d@example.com", name, w, seq))
	})
}

// signIn is one whole sign-in; any failure (the faults under test) only
// means it did not happen from the client's point of view.
func (s *signer) signIn(ctx context.Context, email string) bool {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	code, err := s.c.post(ctx, "/api/auth/otp/request/", map[string]string{"identifier": email}, nil, nil)
	if err != nil || code != http.StatusOK {
		return false
	}
	otp, err := s.mail.Code(ctx, email)
	if err != nil {
		return false
	}
	var res struct {
		Tokens struct {
			Access string `json:"access"`
		} `json:"tokens"`
		User struct {
			ID    int64  `json:"id"`
			Email string `json:"email"`
		} `json:"user"`
	}
	code, err = s.c.post(ctx, "/api/auth/otp/verify/", map[string]string{"identifier": email, "otp_code": otp}, nil, &res)
	if err != nil || code != http.StatusOK || res.Tokens.Access == "" {
		return false
	}
	s.mu.Lock()
	s.signed[email] = signedIn{userID: res.User.ID, access: res.Tokens.Access}
	s.mu.Unlock()
	return true
}

func (s *signer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.signed)
}

func (s *signer) waitSigned(t testing.TB, n int, timeout time.Duration) time.Duration {
	t.Helper()
	return eventually(t, fmt.Sprintf("%d sign-ins", n), timeout, func() error {
		if got := s.count(); got < n {
			return fmt.Errorf("%d signed in", got)
		}
		return nil
	})
}

func (s *signer) snapshot() map[string]signedIn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]signedIn, len(s.signed))
	for k, v := range s.signed {
		out[k] = v
	}
	return out
}

// checkUsers waits (bounded) until the users read model has caught up
// with the event store, then checks that every sign-in that got tokens
// has exactly one user, the one it was told, and that the read model
// holds exactly the users the event store registered.
func (s *signer) checkUsers(t testing.TB, pg *pgxpool.Pool, timeout time.Duration) {
	t.Helper()
	signed := s.snapshot()
	var users map[string]int64
	took := eventually(t, "users read model catches up with the event store", timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		users, err = rig.Users(ctx, pg)
		if _, final := errors.AsType[*rig.Inconsistent](err); final {
			t.Fatal(err)
		}
		return err
	})
	for email, in := range signed {
		id, ok := users[email]
		switch {
		case !ok:
			t.Errorf("%s signed in (user %d) but has no user row", email, in.userID)
		case id != in.userID:
			t.Errorf("%s signed in as user %d but its row is user %d", email, in.userID, id)
		}
	}
	t.Logf("%d sign-ins got tokens, %d users; read model caught up in %v", len(signed), len(users), took.Round(time.Millisecond))
}

// checkTokens checks that the access tokens of signed still work.
func (s *signer) checkTokens(t testing.TB, signed map[string]signedIn) {
	t.Helper()
	for email, in := range signed {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code, err := s.c.get(ctx, "/api/profile/", map[string]string{"Authorization": "Bearer " + in.access})
		cancel()
		if err != nil || code != http.StatusOK {
			t.Errorf("%s's access token after the restart: %d %v", email, code, err)
		}
	}
}

// TestSIGKILLDuringSignin kills serve while clients sign in with e-mailed
// codes, restarts it and checks users, the event store, the read model and
// the tokens issued before the kill.
func TestSIGKILLDuringSignin(t *testing.T) {
	t.Parallel()
	_, redisURL := startRedis(t)
	pgURL := testenv.PostgresURL(t)
	mail := startMailbox(t)
	env := mail.Env()
	env["POSTGRES__URL"], env["CLICKHOUSE__URL"], env["REDIS__URL"] = pgURL, localClickHouse(t), redisURL
	c := newCfgd(t, env)
	c.run("migrate")
	c.start()
	c.waitReady(60 * time.Second)

	s := newSigner(c, mail)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := s.run(ctx, "a", 6, 0)
	s.waitSigned(t, 20, 60*time.Second)
	c.kill()
	before := s.snapshot()
	time.Sleep(200 * time.Millisecond)
	c.start()
	c.waitReady(60 * time.Second)
	s.waitSigned(t, len(before)+10, 60*time.Second)
	cancel()
	wait()
	s.checkUsers(t, openPostgres(t, pgURL), 45*time.Second)
	s.checkTokens(t, before)
}
