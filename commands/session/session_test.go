package session_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/session"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// register appends a user directly, for states no command produces yet.
func register(t *testing.T, db store.DB, id int64, email, password string, staff, active bool) {
	t.Helper()
	ctx := context.Background()
	hash, err := user.HashPassword(password)
	if err != nil {
		t.Fatal(err)
	}
	claim, _ := events.New(identity.EmailStream(email), identity.EmailClaimed{Email: email, UserID: id}, events.Metadata{}, time.Now())
	if _, err := store.Append(ctx, db, identity.EmailStream(email), events.NoStream, claim); err != nil {
		t.Fatal(err)
	}
	reg, _ := events.New(identity.UserStream(id), identity.UserRegistered{UserID: id, Email: email, PasswordHash: hash, IsActive: active, IsStaff: staff}, events.Metadata{}, time.Now())
	if _, err := store.Append(ctx, db, identity.UserStream(id), events.NoStream, reg); err != nil {
		t.Fatal(err)
	}
}

func TestLoginDecisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	keys, err := token.Load(token.HS256, strings.Repeat("s", 32), "")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := token.New(token.Config{Issuer: "i", Audience: "a", AccessTTL: time.Minute, RefreshTTL: time.Hour, WebTTL: time.Hour}, keys)
	if err != nil {
		t.Fatal(err)
	}
	register(t, pool, 9001, "staff@example.com", "pw-staff-1", true, true)
	register(t, pool, 9002, "plain@example.com", "pw-plain-1", false, true)
	register(t, pool, 9003, "gone@example.com", "pw-gone-1", true, false)
	h := session.NewLoginHandler(pool, tokens, time.Now)

	tests := []struct {
		email, pw string
		want      error
	}{
		{"staff@example.com", "pw-staff-1", nil},
		{"STAFF@example.com", "pw-staff-1", nil},
		{"staff@example.com", "wrong", session.ErrBadCredentials},
		{"plain@example.com", "pw-plain-1", session.ErrNotStaff},
		{"plain@example.com", "wrong", session.ErrBadCredentials},
		{"gone@example.com", "pw-gone-1", session.ErrBadCredentials},
		{"nobody@example.com", "pw-staff-1", session.ErrBadCredentials},
		{"not an address", "pw-staff-1", session.ErrBadCredentials},
	}
	for _, tc := range tests {
		res, err := h.Handle(ctx, session.Login{Email: tc.email, Password: tc.pw})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s/%s: %v, want %v", tc.email, tc.pw, err, tc.want)
			continue
		}
		if err == nil {
			c, err := tokens.Parse(res.Token.Token, token.Web)
			if err != nil || c.UserID() != 9001 || c.SessionID != res.SessionID || c.UserVersion != res.User.Version {
				t.Errorf("web token %+v %v", c, err)
			}
			s, err := session.Load(ctx, pool, res.SessionID)
			if err != nil || s.Kind != identity.SessionWeb || s.UserID != 9001 {
				t.Errorf("session %+v %v", s, err)
			}
		}
	}
	// Logout of someone else's session is refused.
	res, _ := h.Handle(ctx, session.Login{Email: "staff@example.com", Password: "pw-staff-1"})
	lo := session.NewLogoutHandler(pool, time.Now)
	if _, err := lo.Handle(ctx, session.Logout{SessionID: res.SessionID, UserID: 9002}); !errors.Is(err, session.ErrNoSession) {
		t.Fatalf("logout of another user's session: %v", err)
	}
	if _, err := lo.Handle(ctx, session.Logout{SessionID: "not-a-uuid", UserID: 9001}); !errors.Is(err, session.ErrNoSession) {
		t.Fatalf("logout of a bad id: %v", err)
	}
}

// TestTokensCarryTheCommandsInstant: every token a command issues has the
// command's instant as iat, so exp - iat is exactly the TTL even when the
// token service's own clock moves on between the two reads (a CI run once
// saw a refresh token with 168 h - 1 s when they crossed a second).
func TestTokensCarryTheCommandsInstant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	keys, err := token.Load(token.HS256, strings.Repeat("s", 32), "")
	if err != nil {
		t.Fatal(err)
	}
	// The command's clock stands still; the token service's moves a
	// second at every read, as if each read crossed a second.
	at := time.Now().Truncate(time.Second)
	var ticks int64
	ticking := func() time.Time { ticks++; return at.Add(time.Duration(ticks) * time.Second) }
	cfg := token.Config{Issuer: "i", Audience: "a", AccessTTL: time.Minute, RefreshTTL: time.Hour, WebTTL: 2 * time.Hour, Now: ticking}
	tokens, err := token.New(cfg, keys)
	if err != nil {
		t.Fatal(err)
	}
	still := func() time.Time { return at }
	exact := func(name string, c token.Claims, ttl time.Duration) {
		t.Helper()
		if !c.IssuedAt.Time.Equal(at) || c.ExpiresAt.Sub(c.IssuedAt.Time) != ttl {
			t.Errorf("%s: iat %v exp %v, want iat %v and exp - iat = %v", name, c.IssuedAt, c.ExpiresAt, at, ttl)
		}
	}

	w, pair, err := session.StartAPI(tokens, uuid.NewString(), 9101, 1, events.Metadata{}, at)
	if err != nil {
		t.Fatal(err)
	}
	exact("api access", pair.Access.Claims, cfg.AccessTTL)
	exact("api refresh", pair.Refresh.Claims, cfg.RefreshTTL)
	if _, err := store.Append(ctx, pool, w.Stream, w.Expected, w.Events...); err != nil {
		t.Fatal(err)
	}
	// Parse checks exp and nbf against the ticking clock: keep it near.
	ticks = 0
	res, err := session.NewRefreshHandler(pool, tokens, true, still).Handle(ctx, session.Refresh{Token: pair.Refresh.Token})
	if err != nil {
		t.Fatal(err)
	}
	exact("refreshed access", res.Access.Claims, cfg.AccessTTL)
	exact("rotated refresh", res.Refresh.Claims, cfg.RefreshTTL)

	register(t, pool, 9102, "instant@example.com", "pw-instant-1", true, true)
	ticks = 0
	login, err := session.NewLoginHandler(pool, tokens, still).Handle(ctx, session.Login{Email: "instant@example.com", Password: "pw-instant-1"})
	if err != nil {
		t.Fatal(err)
	}
	exact("web", login.Token.Claims, cfg.WebTTL)
}
