package projectors_test

import (
	"context"
	"fmt"
	"github.com/cfgd/cfgd/projections/projectors"
	"net/http"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/app/signin"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/projections"
)

// snapshot renders every identity read model as text.
func snapshot(t *testing.T, e *authtest.Env) string {
	t.Helper()
	return testenv.Dump(t, e.Pool,
		`SELECT id, email, first_name, last_name, password_hash IS NOT NULL, is_active, is_staff, is_superuser, date_joined, last_login, version FROM users ORDER BY id`,
		`SELECT user_id, bio, avatar, phone, date_of_birth, created_at, updated_at FROM profiles ORDER BY user_id`,
		`SELECT url, name FROM registration_sources ORDER BY url`,
		`SELECT l.user_id, s.url, l.created_at FROM user_registration_sources l JOIN registration_sources s ON s.id = l.source_id ORDER BY 1, 2`,
		`SELECT session_id, user_id, kind, reason, revoked_at, expires_at FROM session_revocations ORDER BY session_id`,
	)
}

// Replaying the whole log, twice over and then from scratch, gives the same
// read models; the projections have no side effects to repeat (the e-mail
// is sent by the request command, never from events).
func TestReplayRebuildsTheSameReadModels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := authtest.Start(t, authtest.Options{NoPipeline: true, Config: func(c *signin.Config) { c.JWT.RotateRefresh = true }})
	a := authtest.Email("replay-a")
	s := e.SignIn(t, a, "source_url", "https://example.com/?utm_source=news&utm_campaign=launch")
	e.SignIn(t, a)
	b := e.SignIn(t, authtest.Email("replay-b"), "source_url", "/register/")
	code := e.RequestCode(t, a)
	e.Verify(t, a, wrong(code))
	e.Do(t, http.MethodPost, "/api/auth/token/refresh/", map[string]string{"refresh": b.Refresh})
	e.Do(t, http.MethodPost, "/api/auth/logout/", map[string]string{"refresh": s.Refresh})
	if _, err := user.NewCreateSuperuserHandler(e.Pool, e.Clock.Now).Handle(ctx, user.CreateSuperuser{Email: authtest.Email("replay-admin"), Password: "admin-password"}); err != nil {
		t.Fatal(err)
	}
	avatars := user.NewChangeAvatarHandler(e.Pool, e.Clock.Now)
	for range 2 {
		p, err := user.NewAvatarPath(s.UserID, user.AvatarPNG)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := avatars.Handle(ctx, user.ChangeAvatar{UserID: s.UserID, Avatar: p}); err != nil {
			t.Fatal(err)
		}
	}
	mailsBefore := len(e.Mail.Messages())

	reg, err := events.NewRegistry(identity.Events()...)
	if err != nil {
		t.Fatal(err)
	}
	all, err := store.ReadAll(ctx, e.Pool, 0, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	apply := func() {
		for _, env := range all {
			for _, p := range projectors.Identity() {
				if _, err := projections.Apply(ctx, e.Pool, reg, p, env); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	apply()
	first := snapshot(t, e)
	if !strings.Contains(first, fmt.Sprintf("avatars/%d/", s.UserID)) {
		t.Fatalf("the avatar was not projected:\n%s", first)
	}
	apply() // every event again: all duplicates
	if again := snapshot(t, e); again != first {
		t.Fatalf("re-delivery changed the read models:\n%s\nvs\n%s", first, again)
	}
	if _, err := e.Pool.Exec(ctx, `TRUNCATE users, profiles, registration_sources, user_registration_sources, session_revocations, projection_checkpoints, projection_positions`); err != nil {
		t.Fatal(err)
	}
	apply()
	if rebuilt := snapshot(t, e); rebuilt != first {
		t.Fatalf("rebuild differs:\n%s\nvs\n%s", first, rebuilt)
	}
	if len(e.Mail.Messages()) != mailsBefore {
		t.Fatal("replay sent e-mail")
	}
	t.Logf("%d events, read models:\n%s", len(all), first)
}

func wrong(code string) string {
	if code == "000000" {
		return "000001"
	}
	return "000000"
}
