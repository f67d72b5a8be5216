package projectors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/catalog"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/projectors"
)

// Applying the log, then every event again, gives one row per key with its
// revocation; a re-delivery changes nothing.
func TestProjectionIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if _, err := user.NewCreateSuperuserHandler(pool, time.Now).Handle(ctx, user.CreateSuperuser{Email: "p@example.com"}); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	create := apikeys.NewCreateHandler(pool, time.Now)
	a, err := create.Handle(ctx, apikeys.Create{Name: "a", KeyType: "cli", UserEmail: "p@example.com", ExpiresAt: &exp, CreatedBy: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create.Handle(ctx, apikeys.Create{Name: "b", KeyType: "service", UserEmail: "p@example.com", CreatedBy: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := apikeys.NewRevokeHandler(pool, time.Now).Handle(ctx, apikeys.Revoke{ID: a.State.ID}); err != nil {
		t.Fatal(err)
	}
	reg, err := events.NewRegistry(catalog.Events()...)
	if err != nil {
		t.Fatal(err)
	}
	all, err := store.ReadAll(ctx, pool, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	p := projectors.Keys()
	snapshot := func() string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT id, name, key_type, key_hash, masked_key, user_id, user_email, is_active, revoked_at IS NOT NULL, request_count, last_used_at, expires_at, created_by FROM api_keys ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := ""
		for rows.Next() {
			v, _ := rows.Values()
			out += fmt.Sprintln(v...)
		}
		return out
	}
	for pass := range 2 {
		for _, env := range all {
			want := projections.Applied
			// The checkpoint moves past ignored types too, so a second
			// delivery of anything is a duplicate.
			switch {
			case pass == 1:
				want = projections.Duplicate
			case !p.Handles(env.Type):
				want = projections.Ignored
			}
			got, err := projections.Apply(ctx, pool, reg, p, env)
			if err != nil || got != want {
				t.Fatalf("pass %d %s: %v %v", pass, env.Type, got, err)
			}
		}
	}
	got := snapshot()
	want := fmt.Sprintf("%d a cli %s %s", a.State.ID, a.State.KeyHash, a.State.MaskedKey)
	if len(got) == 0 || got[:len(want)] != want {
		t.Fatalf("read model:\n%s", got)
	}
	var active, revoked int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE is_active), count(*) FILTER (WHERE revoked_at IS NOT NULL) FROM api_keys`).Scan(&active, &revoked); err != nil || active != 1 || revoked != 1 {
		t.Fatalf("active %d revoked %d: %v", active, revoked, err)
	}
}
