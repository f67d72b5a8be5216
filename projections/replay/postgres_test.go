package replay_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/projections/projectors"
	"github.com/cfgd/cfgd/readmodels/checkpoints"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/replay"
)

// traffic builds the identity read models live: sign-ins from sources,
// profile updates, a refresh and logouts (revocations).
func traffic(t *testing.T, e *authtest.Env, prefix string, n int) {
	t.Helper()
	for i := range n {
		s := e.SignIn(t, authtest.Email(fmt.Sprintf("%s-%d", prefix, i)), "source_url", fmt.Sprintf("https://example.com/?utm_source=s%d", i%3))
		bearer := authtest.Bearer(s.Access)
		if r := e.Do(t, http.MethodPatch, "/api/profile/", map[string]any{"first_name": fmt.Sprintf("N%d", i), "bio": "bio " + prefix, "date_of_birth": "1990-01-02"}, bearer...); r.Status != http.StatusOK {
			t.Fatalf("profile: %d %s", r.Status, r.Raw)
		}
		if i%2 == 0 {
			if r := e.Do(t, http.MethodPost, "/api/auth/logout/", map[string]string{"refresh": s.Refresh}); r.Status >= 300 {
				t.Fatalf("logout: %d %s", r.Status, r.Raw)
			}
		}
	}
}

// waitAll waits until both identity projections have applied every stream.
func waitAll(t *testing.T, e *authtest.Env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := e.Pool.Query(ctx, `SELECT stream_id, max(stream_version) FROM events GROUP BY stream_id`)
	if err != nil {
		t.Fatal(err)
	}
	type sv struct {
		s string
		v int64
	}
	var all []sv
	for rows.Next() {
		var x sv
		if err := rows.Scan(&x.s, &x.v); err != nil {
			t.Fatal(err)
		}
		all = append(all, x)
	}
	rows.Close()
	for _, x := range all {
		for _, p := range projectors.Identity() {
			if err := checkpoints.Wait(ctx, e.Pool, p.Name, x.s, x.v); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// snapshot renders every row of every table of the identity projections,
// their checkpoints and the tables' index names.
func snapshot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var qs []string
	for _, p := range projectors.Identity() {
		for _, tb := range p.Tables {
			qs = append(qs, `SELECT * FROM `+tb+` ORDER BY 1`)
		}
		qs = append(qs, fmt.Sprintf(`SELECT * FROM projection_checkpoints WHERE projection = '%s' ORDER BY stream_id`, p.Name))
	}
	qs = append(qs, `SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1, 2`,
		`SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2`)
	return testenv.Dump(t, pool, qs...)
}

func registry(t *testing.T) *events.Registry {
	t.Helper()
	reg, err := events.NewRegistry(identity.Events()...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func shadowSchemas(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'replay\_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Replaying the identity projections while the live runner keeps running
// gives the same rows, checkpoints, indexes and constraints as the live
// build, and the live runner goes on projecting into the swapped-in tables.
func TestReplayMatchesTheLiveReadModels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := authtest.Start(t, authtest.Options{})
	traffic(t, e, "det", 6)
	waitAll(t, e)
	before := snapshot(t, e.Pool)
	if !strings.Contains(before, "bio det") || !strings.Contains(before, "utm_source=s2") {
		t.Fatalf("the live read models miss the traffic:\n%s", before)
	}
	reg := registry(t)
	for _, p := range projectors.Identity() {
		var calls int
		res, err := replay.Run(ctx, e.Pool, reg, p, replay.Config{BatchSize: 7}, func(done, total int64) { calls++ })
		if err != nil {
			t.Fatal(err)
		}
		if res.Events == 0 || res.Applied == 0 || calls < 2 {
			t.Fatalf("%s: %+v after %d progress calls", p.Name, res, calls)
		}
	}
	if after := snapshot(t, e.Pool); after != before {
		t.Fatalf("replay differs from the live build:\nlive:\n%s\nreplayed:\n%s", before, after)
	}
	if n := shadowSchemas(t, e.Pool); n != 0 {
		t.Fatalf("%d shadow schemas left", n)
	}
	// The runner goes on with the swapped-in tables.
	s := e.SignIn(t, authtest.Email("det-after"))
	e.WaitProjected(t, projectors.UsersName, fmt.Sprintf("user-%d", s.UserID))
	var n int
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM users WHERE id = $1`, s.UserID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("user after the swap: %d %v", n, err)
	}
}

// Events appended while a replay runs, and applied meanwhile by the live
// runner to the old tables, are caught up before the swap: the swapped-in
// tables hold them, and a second replay of the quiet log gives the same.
func TestReplayCatchesUpWithLiveTraffic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := authtest.Start(t, authtest.Options{})
	traffic(t, e, "early", 8)
	waitAll(t, e)
	reg := registry(t)
	p := projectors.Users()
	var live chan struct{}
	var first int64
	res, err := replay.Run(ctx, e.Pool, reg, p, replay.Config{BatchSize: 2}, func(done, total int64) {
		if live == nil {
			first = total
			live = make(chan struct{})
			go func() {
				defer close(live)
				traffic(t, e, "during", 3)
			}()
		}
		// Keep the rebuild going until the traffic is through.
		select {
		case <-live:
		case <-time.After(50 * time.Millisecond):
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	<-live
	if res.Events <= first {
		t.Fatalf("read %d events, %d were there at the start: nothing arrived during the replay", res.Events, first)
	}
	waitAll(t, e)
	during := snapshot(t, e.Pool)
	if !strings.Contains(during, "bio during") {
		t.Fatalf("the traffic during the replay is missing:\n%s", during)
	}
	if _, err := replay.Run(ctx, e.Pool, reg, p, replay.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	if again := snapshot(t, e.Pool); again != during {
		t.Fatalf("replay under traffic differs from a quiet one:\n%s\nvs\n%s", during, again)
	}
}

func TestReplayRefusesASecondReplayAndReactors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	e.SignIn(t, authtest.Email("busy"))
	reg := registry(t)
	p := projectors.Users()
	var second error
	_, err := replay.Run(ctx, e.Pool, reg, p, replay.Config{}, func(done, _ int64) {
		if done == 0 {
			_, second = replay.Run(ctx, e.Pool, reg, projectors.Users(), replay.Config{}, nil)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(second, replay.ErrBusy) || second.Error() != "replay identity.users: another replay of it is running; wait for that one to finish or stop it" {
		t.Fatalf("second replay: %v", second)
	}
	// Once the first is done, another may run.
	if _, err := replay.Run(ctx, e.Pool, reg, p, replay.Config{}, nil); err != nil {
		t.Fatal(err)
	}

	r := projections.NewReactor("test.mailer")
	projections.On(r, func(context.Context, projections.Tx, events.Envelope, *identity.UserRegistered) error {
		t.Error("a reactor ran during replay")
		return nil
	})
	_, err = replay.Run(ctx, e.Pool, reg, r, replay.Config{}, nil)
	if !errors.Is(err, replay.ErrReactor) || err.Error() != "replay test.mailer: is a reactor; replay never runs reactors" {
		t.Fatalf("reactor: %v", err)
	}
}

// A cancelled replay leaves the live tables as they were and no shadow
// schema; the next one succeeds.
func TestReplayCancelledLeavesTheLiveTables(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	traffic(t, e, "cancel", 4)
	waitAll(t, e)
	before := snapshot(t, e.Pool)
	reg := registry(t)
	p := projectors.Users()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := replay.Run(ctx, e.Pool, reg, p, replay.Config{BatchSize: 1}, func(done, _ int64) {
		if done >= 3 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled replay: %v", err)
	}
	if after := snapshot(t, e.Pool); after != before {
		t.Fatalf("a cancelled replay changed the live tables:\n%s\nvs\n%s", before, after)
	}
	if n := shadowSchemas(t, e.Pool); n != 0 {
		t.Fatalf("%d shadow schemas left", n)
	}
	if _, err := replay.Run(context.Background(), e.Pool, reg, p, replay.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, e.Pool); after != before {
		t.Fatalf("replay after a cancelled one differs:\n%s\nvs\n%s", before, after)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  replay.Config
		want string
	}{
		{"defaults", replay.Config{}.WithDefaults(), ""},
		{"batch", replay.Config{BatchSize: -1, LockTimeout: time.Second}, "batch size -1"},
		{"both", replay.Config{BatchSize: 200_000, LockTimeout: time.Microsecond}, "lock timeout"},
		{"smallest", replay.Config{BatchSize: 1, LockTimeout: time.Millisecond}, ""},
		{"largest batch", replay.Config{BatchSize: 100_000, LockTimeout: time.Second}, ""},
		{"batch over", replay.Config{BatchSize: 100_001, LockTimeout: time.Second}, "batch size 100001"},
		{"batch zero", replay.Config{BatchSize: 0, LockTimeout: time.Second}, "batch size 0"},
		{"lock under", replay.Config{BatchSize: 1, LockTimeout: time.Millisecond - 1}, "lock timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
}

// A long reader of a live table makes the swap wait and retry in short
// attempts; one that never lets go fails the replay, leaving the live
// tables and no shadow schema.
func TestReplaySwapWaitsForReaders(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{NoPipeline: true})
	e.SignIn(t, authtest.Email("reader"))
	reg := registry(t)
	// Without the live runner, a first replay builds the tables.
	if _, err := replay.Run(context.Background(), e.Pool, reg, projectors.Users(), replay.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		hold time.Duration
		ok   bool
	}{
		{"released", 300 * time.Millisecond, true},
		{"held", time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			before := snapshot(t, e.Pool)
			tx, err := e.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SELECT count(*) FROM users`); err != nil {
				_ = tx.Rollback(ctx)
				t.Fatal(err)
			}
			// The reader ends after hold, or when the test is done.
			stop, released := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(released)
				select {
				case <-time.After(tc.hold):
				case <-stop:
				}
				_ = tx.Rollback(ctx)
			}()
			release := func() { close(stop); <-released }
			_, err = replay.Run(ctx, e.Pool, reg, projectors.Users(), replay.Config{LockTimeout: 50 * time.Millisecond}, nil)
			switch {
			case tc.ok && err != nil:
				t.Fatal(err)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), "lock live tables")):
				t.Fatalf("replay with a reader holding users: %v", err)
			}
			release()
			if after := snapshot(t, e.Pool); after != before {
				t.Fatalf("the live tables changed:\n%s\nvs\n%s", before, after)
			}
			if n := shadowSchemas(t, e.Pool); n != 0 {
				t.Fatalf("%d shadow schemas left", n)
			}
		})
	}
}

// A handler that fails ends the replay with its error, whichever batch it
// is in (the read-ahead bulk load included): nothing after it is applied
// past it, the live tables are as they were and no shadow schema is left.
func TestReplayStopsAtAFailingHandler(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	traffic(t, e, "failing", 6)
	waitAll(t, e)
	before := snapshot(t, e.Pool)
	reg := registry(t)
	for _, batch := range []int{1, 1000} {
		seen := 0
		p := projections.New("test.failing", "session_revocations")
		projections.On(p, func(context.Context, projections.Tx, events.Envelope, *identity.UserRegistered) error {
			if seen++; seen == 3 {
				return errors.New("handler broke on the third user")
			}
			return nil
		})
		_, err := replay.Run(context.Background(), e.Pool, reg, p, replay.Config{BatchSize: batch}, nil)
		if err == nil || !strings.Contains(err.Error(), "handler broke on the third user") {
			t.Fatalf("batch %d: replay over a failing handler: %v", batch, err)
		}
		if after := snapshot(t, e.Pool); after != before {
			t.Fatalf("batch %d: a failed replay changed the live tables", batch)
		}
		if n := shadowSchemas(t, e.Pool); n != 0 {
			t.Fatalf("batch %d: %d shadow schemas left", batch, n)
		}
	}
}

// Shadow schema names stay valid identifiers: short names are kept
// readable, longer ones are cut and made unique by a hash.
func TestSchemaName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, want string }{
		{"identity.users", "replay_identity_users"},
		{"Tasks.Queues-v2", "replay_tasks_queues_v2"},
		// 43 characters: "replay_" + 43 = 50, kept whole.
		{strings.Repeat("a", 43), "replay_" + strings.Repeat("a", 43)},
	} {
		if got := replay.SchemaName(tc.name); got != tc.want {
			t.Errorf("SchemaName(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	long1, long2 := replay.SchemaName(strings.Repeat("a", 44)), replay.SchemaName(strings.Repeat("a", 45))
	if len(long1) != 49 || long1 == long2 || !strings.HasPrefix(long1, "replay_"+strings.Repeat("a", 33)+"_") {
		t.Errorf("long names: %q, %q", long1, long2)
	}
}

// A handler failing on an event that arrives while the replay runs (after
// the bulk load, in the catch-up) ends the replay the same way.
func TestReplayStopsAtAFailingHandlerInTheCatchUp(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	traffic(t, e, "early", 3)
	waitAll(t, e)
	late := authtest.Email("late")
	p := projections.New("test.failing-late", "session_revocations")
	projections.On(p, func(_ context.Context, _ projections.Tx, _ events.Envelope, u *identity.UserRegistered) error {
		if u.Email == late {
			return errors.New("handler broke on the late user")
		}
		return nil
	})
	signedIn := false
	_, err := replay.Run(context.Background(), e.Pool, registry(t), p, replay.Config{}, func(done, total int64) {
		if !signedIn {
			signedIn = true
			e.SignIn(t, late)
		}
	})
	if err == nil || !strings.Contains(err.Error(), "handler broke on the late user") {
		t.Fatalf("replay over a handler failing in the catch-up: %v", err)
	}
	if n := shadowSchemas(t, e.Pool); n != 0 {
		t.Fatalf("%d shadow schemas left", n)
	}
}
