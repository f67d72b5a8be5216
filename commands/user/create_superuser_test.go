package user_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events/identity"
)

func TestCreateSuperuser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	h := user.NewCreateSuperuserHandler(pool, time.Now)

	for _, tc := range []struct {
		email, password string
		want            error
		msg             string
	}{
		{"", "long-password", identity.ErrEmailRequired, "Email is required"},
		{"   ", "long-password", identity.ErrEmailRequired, "Email is required"},
		{"not-an-email", "long-password", identity.ErrInvalidEmail, ""},
		{"short@example.com", "short", user.ErrPasswordTooShort, ""},
	} {
		_, err := h.Handle(ctx, user.CreateSuperuser{Email: tc.email, Password: tc.password})
		if !errors.Is(err, tc.want) || (tc.msg != "" && err.Error() != tc.msg) || !user.IsInputError(err) {
			t.Errorf("%q/%q: %v, want %v", tc.email, tc.password, err, tc.want)
		}
	}

	u, err := h.Handle(ctx, user.CreateSuperuser{Email: " Root@Example.com ", Password: "long-password"})
	if err != nil {
		t.Fatal(err)
	}
	if u.ID < 1 || u.Email != "root@example.com" || !u.IsStaff || !u.IsSuperuser || !u.IsActive || !user.CheckPassword(u.PasswordHash, "long-password") {
		t.Fatalf("created %+v", u)
	}
	if _, err := h.Handle(ctx, user.CreateSuperuser{Email: "ROOT@example.com"}); !errors.Is(err, user.ErrEmailTaken) {
		t.Fatalf("second superuser with the same address: %v", err)
	}
	// Without a password: allowed, none is set.
	np, err := h.Handle(ctx, user.CreateSuperuser{Email: "nopass@example.com"})
	if err != nil || np.PasswordHash != "" || np.ID == u.ID {
		t.Fatalf("without password: %+v %v", np, err)
	}

	// Racing creations of one address: exactly one wins.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = h.Handle(ctx, user.CreateSuperuser{Email: "race@example.com"}) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, user.ErrEmailTaken):
			t.Fatalf("racing create: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d creations won, want 1", won)
	}
}
