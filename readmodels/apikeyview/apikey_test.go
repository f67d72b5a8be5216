package apikeyview_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  apikeyview.Config
		want string
	}{
		{apikeyview.Config{}, ""},
		{apikeyview.Config{CacheTTL: time.Second}, ""},
		{apikeyview.Config{CacheTTL: 2 * time.Second}, "cache TTL"},
		{apikeyview.Config{CacheTTL: -1, CacheSize: -1}, "cache size"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v", tc.cfg, err)
		}
	}
}

// Keys are found by hash only: a revocation written to the read model is
// seen after at most the cache TTL, and strings that are not keys never
// reach the database.
func TestAuthenticateReadsTheReadModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	now := time.Now()
	clock := func() time.Time { return now }
	a, err := apikeyview.NewAuthenticator(pool, apikeyview.Config{CacheTTL: time.Second, CacheSize: 2, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	raw := "cfgd_" + strings.Repeat("k", 43)
	if _, err := a.Authenticate(ctx, raw); !errors.Is(err, apikeyview.ErrInvalidKey) {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO api_keys (id, name, key_type, key_hash, masked_key, user_id, user_email, created_at, created_by)
		VALUES (1, 'k', 'cli', encode(sha256($1::bytea), 'hex'), 'cfgd...kkkk', 5, 'a@example.com', now(), 'test')`, raw); err != nil {
		t.Fatal(err)
	}
	// The miss is cached for up to the TTL.
	if _, err := a.Authenticate(ctx, raw); !errors.Is(err, apikeyview.ErrInvalidKey) {
		t.Fatalf("cached miss: %v", err)
	}
	now = now.Add(time.Second)
	o, err := a.Authenticate(ctx, raw)
	if err != nil || o.KeyID != 1 || o.UserID != 5 || o.KeyType != "cli" {
		t.Fatalf("valid key: %+v %v", o, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE api_keys SET is_active = false`); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	if _, err := a.Authenticate(ctx, raw); !errors.Is(err, apikeyview.ErrInvalidKey) {
		t.Fatalf("revoked key: %v", err)
	}
	for _, bad := range []string{"", "Bearer x", "cfgd_" + strings.Repeat("x", 300), strings.ToUpper(raw)} {
		if _, err := a.Authenticate(ctx, bad); !errors.Is(err, apikeyview.ErrInvalidKey) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
