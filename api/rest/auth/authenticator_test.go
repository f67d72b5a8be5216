package auth_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/token"
)

// The HTTP middleware is one adapter over signin.Authenticator; a caller
// without HTTP (the gRPC interceptors, say) must get the same verdict for
// the same credentials.
func TestHTTPAndDirectCallersAgree(t *testing.T) {
	t.Parallel()
	e := staffEnv(t, authtest.Options{})
	admin := authtest.Email("agree-admin")
	e.Superuser(t, admin, "right-password")
	staff := e.SignIn(t, admin)
	plain := e.SignIn(t, authtest.Email("agree-user"))
	revoked := e.SignIn(t, authtest.Email("agree-revoked"))
	if r := e.Do(t, http.MethodPost, "/api/auth/logout/", map[string]string{"refresh": revoked.Refresh}); r.Status != http.StatusOK {
		t.Fatalf("logout: %d %s", r.Status, r.Raw)
	}
	ghost, err := e.App.Tokens.Issue(token.Spec{Kind: token.Access, UserID: 987654, SessionID: uuid.NewString(), UserVersion: 3})
	if err != nil {
		t.Fatal(err)
	}

	auth := e.App.Auth
	bearer := func(raw string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			p, err := auth.Bearer(ctx, raw)
			if err != nil {
				return err
			}
			return auth.RequireStaff(ctx, p)
		}
	}
	password := func(email, pw string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			p, err := auth.Password(ctx, email, pw, "192.0.2.1")
			if err != nil {
				return err
			}
			return auth.RequireStaff(ctx, p)
		}
	}
	tests := []struct {
		name    string
		headers []string
		direct  func(ctx context.Context) error
		status  int
		err     error
	}{
		{"staff access token", authtest.Bearer(staff.Access), bearer(staff.Access), http.StatusOK, nil},
		{"non-staff access token", authtest.Bearer(plain.Access), bearer(plain.Access), http.StatusForbidden, signin.ErrNotStaff},
		{"refresh token as access", authtest.Bearer(staff.Refresh), bearer(staff.Refresh), http.StatusUnauthorized, signin.ErrInvalidToken},
		{"revoked session", authtest.Bearer(revoked.Access), bearer(revoked.Access), http.StatusUnauthorized, signin.ErrInvalidToken},
		{"garbage", authtest.Bearer("not.a.token"), bearer("not.a.token"), http.StatusUnauthorized, signin.ErrInvalidToken},
		{"token of a user that does not exist", authtest.Bearer(ghost.Token), bearer(ghost.Token), http.StatusUnauthorized, signin.ErrInvalidToken},
		{"right password", basic(admin, "right-password"), password(admin, "right-password"), http.StatusOK, nil},
		{"wrong password", basic(admin, "wrong-password"), password(admin, "wrong-password"), http.StatusUnauthorized, signin.ErrBadPassword},
		{"unknown address", basic("nobody@example.com", "whatever-1"), password("nobody@example.com", "whatever-1"), http.StatusUnauthorized, signin.ErrBadPassword},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.Do(t, http.MethodGet, "/probe/", nil, tc.headers...)
			if r.Status != tc.status {
				t.Errorf("HTTP: %d %s, want %d", r.Status, r.Raw, tc.status)
			}
			if err := tc.direct(context.Background()); !errors.Is(err, tc.err) && (tc.err != nil || err != nil) {
				t.Errorf("direct: %v, want %v", err, tc.err)
			}
		})
	}
}

// Ten parallel requests with the right password must all pass, and a
// success must never count as a failure (the security probe saw five 200
// and five 429, and a 15-minute lockout, without a single wrong password).
func TestParallelRightPasswordsAreNeverThrottled(t *testing.T) {
	t.Parallel()
	e := staffEnv(t, authtest.Options{Config: func(c *signin.Config) { c.LoginFailures = 5 }})
	admin := authtest.Email("parallel-right")
	e.Superuser(t, admin, "right-password")
	const n = 10
	for _, via := range []string{"basic", "login"} {
		statuses := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if via == "basic" {
					statuses[i] = e.Do(t, http.MethodGet, "/probe/", nil, basic(admin, "right-password")...).Status
				} else {
					statuses[i] = e.Do(t, http.MethodPost, loginPath, map[string]string{"email": admin, "password": "right-password"}).Status
				}
			}()
		}
		wg.Wait()
		for i, s := range statuses {
			if s != http.StatusOK {
				t.Fatalf("%s request %d: %d (all %v)", via, i, s, statuses)
			}
		}
	}
	if got := failures(t, e, admin); got != 0 {
		t.Fatalf("successes counted as %d failures", got)
	}
}

// A refused attempt runs nothing and counts nothing; parallel wrong
// guesses never overrun the limit.
func TestThrottledAttemptsAreNotCounted(t *testing.T) {
	t.Parallel()
	e := staffEnv(t, authtest.Options{Config: func(c *signin.Config) { c.LoginFailures = 3 }})
	admin := authtest.Email("throttled-right")
	e.Superuser(t, admin, "right-password")
	const n = 12
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = e.Do(t, http.MethodGet, "/probe/", nil, basic(admin, "wrong-"+strconv.Itoa(i))...).Status
		}()
	}
	wg.Wait()
	checked := 0
	for _, s := range statuses {
		switch s {
		case http.StatusUnauthorized:
			checked++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("unexpected status %d (all %v)", s, statuses)
		}
	}
	if checked != 3 || failures(t, e, admin) != 3 {
		t.Fatalf("%d wrong passwords checked, %d counted; want 3 and 3 (statuses %v)", checked, failures(t, e, admin), statuses)
	}
	for range 3 {
		if r := e.Do(t, http.MethodPost, loginPath, map[string]string{"email": admin, "password": "right-password"}); r.Status != http.StatusTooManyRequests {
			t.Fatalf("right password while locked: %d %s", r.Status, r.Raw)
		}
	}
	if got := failures(t, e, admin); got != 3 {
		t.Fatalf("throttled attempts were counted: %d failures, want 3", got)
	}
}

func failures(t *testing.T, e *authtest.Env, email string) int {
	t.Helper()
	v, err := e.Redis.Get(context.Background(), e.Config.RedisPrefix+"fail:login:email:"+email).Int()
	if err != nil && err.Error() != "redis: nil" {
		t.Fatal(err)
	}
	return v
}

// A valid token whose user the event store does not know is refused at
// once, not after waiting out ReadWait for a projection that will never
// have it.
func TestTokenOfUnknownUserIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	e := staffEnv(t, authtest.Options{Config: func(c *signin.Config) { c.ReadWait = time.Minute }})
	ghost, err := e.App.Tokens.Issue(token.Spec{Kind: token.Access, UserID: 424242, SessionID: uuid.NewString(), UserVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := e.Do(t, http.MethodGet, "/probe/", nil, authtest.Bearer(ghost.Token)...)
	if r.Status != http.StatusUnauthorized || ctx.Err() != nil {
		t.Fatalf("unknown user: %d %s", r.Status, r.Raw)
	}
	// A user that exists, asked at a version beyond the event store's, is
	// refused too: the token promises something that never happened.
	admin := authtest.Email("ahead")
	id := e.Superuser(t, admin, "right-password")
	ahead, err := e.App.Tokens.Issue(token.Spec{Kind: token.Access, UserID: id, SessionID: uuid.NewString(), UserVersion: 50})
	if err != nil {
		t.Fatal(err)
	}
	if r := e.Do(t, http.MethodGet, "/probe/", nil, authtest.Bearer(ahead.Token)...); r.Status != http.StatusUnauthorized || ctx.Err() != nil {
		t.Fatalf("user version ahead: %d %s", r.Status, r.Raw)
	}
}
