package otp_test

import (
	"context"
	"testing"

	"github.com/cfgd/cfgd/commands/otp"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// A new user is linked to the registration source of the verify call, or,
// when it names none, to the one of the request that sent the code.
func TestNewUserIsLinkedToItsSource(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	tests := []struct {
		name, requestSource, verifySource, want string
	}{
		{"from the request", "https://example.com/?utm_source=news", "", "https://example.com/?utm_source=news"},
		{"the verify call wins", "https://example.com/a", "https://example.com/b", "https://example.com/b"},
		{"none", "", "", ""},
	}
	for i, tc := range tests {
		email := []string{"src-a@example.com", "src-b@example.com", "src-c@example.com"}[i]
		if _, err := r.request.Handle(ctx, otp.Request{Email: email, SourceURL: tc.requestSource}); err != nil {
			t.Fatal(err)
		}
		res, err := r.verify.Handle(ctx, otp.Verify{Email: email, Code: r.inbox.code(t, email), SourceURL: tc.verifySource})
		if err != nil || !res.Created {
			t.Fatalf("%s: verify %+v %v", tc.name, res, err)
		}
		envs, err := store.Load(ctx, r.pool, identity.UserStream(res.User.ID))
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, e := range envs {
			if e.Type == (identity.SourceLinked{}).EventType() {
				l, err := identity.Data[identity.SourceLinked](e)
				if err != nil {
					t.Fatal(err)
				}
				got = l.SourceURL
			}
		}
		if got != tc.want {
			t.Errorf("%s: linked to %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The tokens of a sign-in promise readers the user version the sign-in
// itself wrote, so a read waits for exactly that.
func TestTokensPromiseTheVersionJustWritten(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	email := "version@example.com"
	for round := range 2 { // a new user, then an existing one
		if _, err := r.request.Handle(ctx, otp.Request{Email: email}); err != nil {
			t.Fatal(err)
		}
		res, err := r.verify.Handle(ctx, otp.Verify{Email: email, Code: r.inbox.code(t, email)})
		if err != nil {
			t.Fatal(err)
		}
		stored, err := store.Version(ctx, r.pool, identity.UserStream(res.User.ID))
		if err != nil {
			t.Fatal(err)
		}
		claims, err := r.tokens.Parse(res.Session.Access.Token, token.Access)
		if err != nil {
			t.Fatal(err)
		}
		if claims.UserVersion != stored || res.User.Version != stored {
			t.Fatalf("round %d: token promises v%d, result says v%d, the stream is at v%d", round, claims.UserVersion, res.User.Version, stored)
		}
	}
}
