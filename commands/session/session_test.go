package session_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
