package user_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/deploy/errcode"
)

func TestNewAvatarPath(t *testing.T) {
	t.Parallel()
	a, err := user.NewAvatarPath(42, user.AvatarPNG)
	if err != nil || !strings.HasPrefix(a, "avatars/42/") || !strings.HasSuffix(a, ".png") || len(a) != len("avatars/42/")+32+len(".png") {
		t.Fatalf("%q %v", a, err)
	}
	if b, _ := user.NewAvatarPath(42, user.AvatarPNG); b == a {
		t.Fatal("two avatars got one name")
	}
	if _, err := user.NewAvatarPath(42, "html"); err == nil {
		t.Fatal("an html avatar was named")
	}
}

func TestChangeAvatar(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	u, err := user.NewCreateSuperuserHandler(pool, time.Now).Handle(ctx, user.CreateSuperuser{Email: "avatar@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := user.NewCreateSuperuserHandler(pool, time.Now).Handle(ctx, user.CreateSuperuser{Email: "other@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	h := user.NewChangeAvatarHandler(pool, time.Now)
	foreign, _ := user.NewAvatarPath(other.ID, user.AvatarPNG)
	// Only a path NewAvatarPath makes for this very user is recorded.
	for _, p := range []string{foreign, "avatars/../../etc/passwd", "/etc/passwd.png", "avatars/" + itoa(u.ID) + "/x.png",
		"avatars/" + itoa(u.ID) + "/" + strings.Repeat("A", 32) + ".png", "avatars/" + itoa(u.ID) + "/" + strings.Repeat("a", 32) + ".svg"} {
		_, err := h.Handle(ctx, user.ChangeAvatar{UserID: u.ID, Avatar: p})
		var invalid *errcode.Error
		if !errors.As(err, &invalid) || invalid.Code != errcode.Invalid {
			t.Errorf("%q: %v", p, err)
		}
	}
	first, _ := user.NewAvatarPath(u.ID, user.AvatarPNG)
	second, _ := user.NewAvatarPath(u.ID, user.AvatarWebP)
	tests := []struct {
		avatar   string
		previous string
		grows    bool
	}{
		{first, "", true},
		{first, "", false}, // a retried request records nothing
		{second, first, true},
		{"", second, true},
		{"", "", false},
	}
	version := int64(0)
	for i, tc := range tests {
		res, err := h.Handle(ctx, user.ChangeAvatar{UserID: u.ID, Avatar: tc.avatar})
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if res.Previous != tc.previous || (res.Version > version) != tc.grows {
			t.Fatalf("%d: %+v after version %d", i, res, version)
		}
		version = res.Version
		s, err := user.Load(ctx, pool, u.ID)
		if err != nil || s.Avatar != tc.avatar {
			t.Fatalf("%d: state %+v %v", i, s, err)
		}
	}
	if _, err := h.Handle(ctx, user.ChangeAvatar{UserID: 999999}); !errors.Is(err, user.ErrNoSuchUser) {
		t.Errorf("unknown user: %v", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
