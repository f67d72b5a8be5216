package projectors_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/catalog"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/projectors"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
	"github.com/cfgd/cfgd/readmodels/checkpoints"
	"github.com/cfgd/cfgd/readmodels/identityview"
)

// project applies every stored event to ps, as the projection runner would.
func project(ctx context.Context, pool *pgxpool.Pool, ps ...*projections.Projection) error {
	reg, err := events.NewRegistry(catalog.Events()...)
	if err != nil {
		return err
	}
	all, err := store.ReadAll(ctx, pool, 0, 10_000)
	if err != nil {
		return err
	}
	for _, env := range all {
		for _, p := range ps {
			if _, err := projections.Apply(ctx, pool, reg, p, env); err != nil {
				return err
			}
		}
	}
	return nil
}

// The gates of the read models authentication trusts watch exactly the
// event types their projections handle.
func TestCurrentGatesWatchTheProjectionsTypes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    *projections.Projection
		name string
		gate []string
	}{
		{projectors.Revocations(), identityview.RevocationsProjection, identityview.RevocationTypes()},
		{projectors.Keys(), apikeyview.KeysProjection, apikeyview.KeyTypes()},
	} {
		got, want := slices.Sorted(slices.Values(tc.gate)), slices.Sorted(slices.Values(tc.p.Types()))
		if tc.p.Name != tc.name || !slices.Equal(got, want) {
			t.Errorf("%s: gate watches %s %v, the projection is %s of %v", tc.name, tc.name, got, tc.p.Name, want)
		}
	}
}

// Chaos finding 5 (docs/testing.md#chaos): a replica started after a
// logout it did not handle, while the revocation was not projected yet
// (its partition waited for this very replica), answered the logged-out
// access token 200. It is not ready, and its first check waits for the
// revocations projection to pass every event stored before its start.
func TestReplicaStartedAfterALogoutRefusesTheTokenAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	s := e.SignIn(t, authtest.Email("restart"))
	if err := project(ctx, e.Pool, projectors.Identity()...); err != nil {
		t.Fatal(err)
	}
	if r := e.Do(t, http.MethodPost, "/api/auth/logout/", map[string]string{"refresh": s.Refresh}); r.Status != http.StatusOK {
		t.Fatalf("logout: %d %s", r.Status, r.Raw)
	}
	replica := e.Replica(t) // started after the logout; the read model lacks it
	if err := replica.App.Auth.Ready(ctx); !errors.Is(err, checkpoints.ErrBehind) {
		t.Fatalf("ready before the revocation is projected: %v", err)
	}
	projected := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		projected <- project(ctx, e.Pool, projectors.Revocations())
	}()
	r := replica.Do(t, http.MethodGet, "/api/profile/", nil, authtest.Bearer(s.Access)...)
	if err := <-projected; err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusUnauthorized {
		t.Fatalf("first request of the restarted replica with the logged-out token: %d %s", r.Status, r.Raw)
	}
	if err := replica.App.Auth.Ready(ctx); err != nil {
		t.Fatalf("not ready once projected: %v", err)
	}
}

// Chaos tool note: an API key created while no serve ran was refused for
// about a second after /readyz said ready. The key authenticator is not
// ready, and its first check waits, until api_keys holds every key event
// stored before the start.
func TestKeyCreatedBeforeTheStartWorksOnTheFirstRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if _, err := user.NewCreateSuperuserHandler(pool, time.Now).Handle(ctx, user.CreateSuperuser{Email: "c@example.com"}); err != nil {
		t.Fatal(err)
	}
	k, err := apikeys.NewCreateHandler(pool, time.Now).Handle(ctx, apikeys.Create{Name: "early", KeyType: "cli", UserEmail: "c@example.com", CreatedBy: "t"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := apikeyview.NewAuthenticator(pool, apikeyview.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(ctx); !errors.Is(err, checkpoints.ErrBehind) {
		t.Fatalf("ready before the key is projected: %v", err)
	}
	// A check that cannot wait long enough is a 503 to retry, never a 401
	// (nor a 500).
	impatient, err := apikeyview.NewAuthenticator(pool, apikeyview.Config{CurrentWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := impatient.Authenticate(ctx, k.Key); errcode.From(err).Code != errcode.Unavailable {
		t.Fatalf("key checked before the read model is current: %v", err)
	}
	projected := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		projected <- project(ctx, pool, projectors.Keys())
	}()
	o, err := a.Authenticate(ctx, k.Key)
	if perr := <-projected; perr != nil {
		t.Fatal(perr)
	}
	if err != nil || o.KeyID != k.State.ID {
		t.Fatalf("first request with a key created before the start: %+v %v", o, err)
	}
	if err := a.Ready(ctx); err != nil {
		t.Fatalf("not ready once projected: %v", err)
	}
}

// Revocations of ended sessions are swept, and never inserted: the live
// table after its sweep holds, row for row, what a replay rebuilds.
func TestRevocationSweepKeepsReplayEqualToLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	ttl := e.Config.JWT.RefreshTTL
	logout := func(back time.Duration) {
		t.Helper()
		e.Clock.Advance(-back)
		defer e.Clock.Advance(back)
		s := e.SignIn(t, authtest.Email("sweep"))
		if r := e.Do(t, http.MethodPost, "/api/auth/logout/", map[string]string{"refresh": s.Refresh}); r.Status != http.StatusOK {
			t.Fatalf("logout: %d %s", r.Status, r.Raw)
		}
	}
	logout(ttl + time.Minute)   // the session ended a minute ago: never inserted
	logout(ttl - 2*time.Second) // ends in two seconds: inserted, then swept
	logout(0)                   // lives on
	dump := func() string {
		return testenv.Dump(t, e.Pool, `SELECT session_id, user_id, kind, reason, revoked_at, expires_at FROM session_revocations ORDER BY session_id`)
	}
	count := func() (n int) {
		if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM session_revocations`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := project(ctx, e.Pool, projectors.Revocations()); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d revocations projected, want 2 (an ended session is not inserted):\n%s", n, dump())
	}
	time.Sleep(3 * time.Second)
	swept, err := identityview.SweepRevocations(ctx, e.Pool)
	if err != nil || swept != 1 {
		t.Fatalf("swept %d: %v", swept, err)
	}
	live := dump()
	if _, err := e.Pool.Exec(ctx, `TRUNCATE session_revocations`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool.Exec(ctx, `DELETE FROM projection_checkpoints WHERE projection = $1`, projectors.RevocationsName); err != nil {
		t.Fatal(err)
	}
	if err := project(ctx, e.Pool, projectors.Revocations()); err != nil {
		t.Fatal(err)
	}
	if replayed := dump(); replayed != live || count() != 1 {
		t.Fatalf("replay differs from the swept live table:\n%s\nvs\n%s", live, replayed)
	}
}
