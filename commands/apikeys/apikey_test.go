package apikeys_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/store"
)

func TestCreateAndRevoke(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if _, err := user.NewCreateSuperuserHandler(pool, time.Now).Handle(ctx, user.CreateSuperuser{Email: "owner@example.com"}); err != nil {
		t.Fatal(err)
	}
	create := apikeys.NewCreateHandler(pool, time.Now)
	bad := []struct {
		cmd   apikeys.Create
		field string
	}{
		{apikeys.Create{KeyType: "cli", UserEmail: "owner@example.com"}, "name"},
		{apikeys.Create{Name: "  ", KeyType: "cli", UserEmail: "owner@example.com"}, "name"},
		{apikeys.Create{Name: "x", KeyType: "CLI", UserEmail: "owner@example.com"}, "key_type"},
		{apikeys.Create{Name: "x", KeyType: "cli", UserEmail: ""}, "user_email"},
		{apikeys.Create{Name: "x", KeyType: "cli", UserEmail: "owner@example.com", ExpiresAt: ptr(time.Now().Add(-time.Second))}, "expires_at"},
	}
	for _, b := range bad {
		_, err := create.Handle(ctx, b.cmd)
		var v *errcode.Error
		if !errors.As(err, &v) || v.Code != errcode.Invalid || v.Fields[b.field] == "" || !apikeys.IsInputError(err) {
			t.Errorf("%+v: %v", b.cmd, err)
		}
	}
	if _, err := create.Handle(ctx, apikeys.Create{Name: "x", KeyType: "cli", UserEmail: "nobody@example.com"}); !errors.Is(err, apikeys.ErrUnknownUser) {
		t.Fatalf("unknown owner: %v", err)
	}

	c, err := create.Handle(ctx, apikeys.Create{Name: " ci ", KeyType: "webhook", UserEmail: "OWNER@example.com", CreatedBy: "t"})
	if err != nil {
		t.Fatal(err)
	}
	s := c.State
	if !strings.HasPrefix(c.Key, apikey.Prefix) || len(c.Key) != 48 || s.Name != "ci" || s.UserEmail != "owner@example.com" ||
		s.KeyHash != apikey.Hash(c.Key) || s.MaskedKey != apikey.Mask(c.Key) || s.Version != 1 {
		t.Fatalf("created %q %+v", c.Key, s)
	}
	envs, err := store.Load(ctx, pool, apikey.Stream(s.ID))
	if err != nil || len(envs) != 1 || strings.Contains(string(envs[0].Data), c.Key[5:]) {
		t.Fatalf("stream: %v %v", envs, err)
	}

	// Concurrent revokes: one event, every caller sees the key revoked.
	revoke := apikeys.NewRevokeHandler(pool, time.Now)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := revoke.Handle(ctx, apikeys.Revoke{ID: s.ID, RevokedBy: "t"})
			if err == nil && (!st.Revoked || st.Version != 2) {
				err = fmt.Errorf("revoke answered %+v, want revoked at version 2", st)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if envs, _ := store.Load(ctx, pool, apikey.Stream(s.ID)); len(envs) != 2 || envs[1].Type != "apikey.revoked" {
		t.Fatalf("after revokes: %v", envs)
	}
	if _, err := revoke.Handle(ctx, apikeys.Revoke{ID: 424242}); !errors.Is(err, apikeys.ErrNotFound) {
		t.Fatalf("unknown key: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestGenerateIsRandom(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		k, err := apikeys.Generate()
		if err != nil || seen[k] || len(k) != 48 {
			t.Fatalf("%q %v", k, err)
		}
		seen[k] = true
	}
}
