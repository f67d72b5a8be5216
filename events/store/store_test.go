package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/store"
)

type noted struct {
	Text string `json:"text"`
}

func (noted) EventType() string { return "test.noted" }

func env(t *testing.T, stream, text string) events.Envelope {
	t.Helper()
	e, err := events.New(stream, noted{Text: text}, events.Metadata{CorrelationID: "c-1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAppendAndLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)

	got, err := store.Append(ctx, db, "s-1", events.NoStream, env(t, "s-1", "a"), env(t, "s-1", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Version != 1 || got[1].Version != 2 || got[0].Position == 0 || got[1].Position <= got[0].Position {
		t.Fatalf("versions/positions not assigned: %+v", got)
	}
	if _, err := store.Append(ctx, db, "s-1", 2, env(t, "s-1", "c")); err != nil {
		t.Fatal(err)
	}
	loaded, err := store.Load(ctx, db, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 3 {
		t.Fatalf("loaded %d events, want 3", len(loaded))
	}
	reg, _ := events.NewRegistry(noted{})
	for i, want := range []string{"a", "b", "c"} {
		ev, err := reg.Decode(loaded[i])
		if err != nil {
			t.Fatal(err)
		}
		if ev.(*noted).Text != want || loaded[i].Version != int64(i+1) || loaded[i].Metadata.CorrelationID != "c-1" {
			t.Fatalf("event %d: %+v", i, loaded[i])
		}
	}
}

func TestAppendConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	if _, err := store.Append(ctx, db, "s", events.NoStream, env(t, "s", "a")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		expected int64
	}{
		{"stream already exists", events.NoStream},
		{"stale version", 0},
		{"future version", 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := store.Append(ctx, db, "s", tc.expected, env(t, "s", "x"))
			var c *store.ConflictError
			if !errors.As(err, &c) || c.Actual != 1 {
				t.Fatalf("want conflict at version 1, got %v", err)
			}
		})
	}
}

// Two transactions that loaded the same version race; exactly one wins and
// the other gets a typed conflict, never a silent overwrite.
func TestConcurrentAppendsOneWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	const racers = 8
	errs := make(chan error, racers)
	start := make(chan struct{})
	for i := range racers {
		go func() {
			<-start
			tx, err := db.Begin(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer tx.Rollback(ctx)
			if _, err := store.Append(ctx, tx, "race", events.NoStream, env(t, "race", fmt.Sprint(i))); err != nil {
				errs <- err
				return
			}
			errs <- tx.Commit(ctx)
		}()
	}
	close(start)
	wins := 0
	for range racers {
		err := <-errs
		switch {
		case err == nil:
			wins++
		case store.IsConflict(err):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	loaded, _ := store.Load(ctx, db, "race")
	if wins != 1 || len(loaded) != 1 {
		t.Fatalf("wins=%d events=%d, want 1 and 1", wins, len(loaded))
	}
}

// AppendMany is all or nothing across streams: one stale expectation keeps
// every other stream's events out too, and the conflict names that stream.
func TestAppendManyIsAtomicAcrossStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	if _, err := store.Append(ctx, db, "b", events.NoStream, env(t, "b", "b1")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		writes   []store.Write
		conflict string // stream named by the conflict; "" for success
	}{
		{"stale second stream", []store.Write{
			{Stream: "a", Expected: events.NoStream, Events: []events.Envelope{env(t, "a", "a1")}},
			{Stream: "b", Expected: 0, Events: []events.Envelope{env(t, "b", "b2")}},
		}, "b"},
		{"claimed stream", []store.Write{
			{Stream: "b", Expected: events.NoStream, Events: []events.Envelope{env(t, "b", "b2")}},
			{Stream: "a", Expected: events.NoStream, Events: []events.Envelope{env(t, "a", "a1")}},
		}, "b"},
		{"all current", []store.Write{
			{Stream: "a", Expected: events.NoStream, Events: []events.Envelope{env(t, "a", "a1"), env(t, "a", "a2")}},
			{Stream: "b", Expected: 1, Events: []events.Envelope{env(t, "b", "b2")}},
			{Stream: "c", Expected: events.AnyVersion, Events: []events.Envelope{env(t, "c", "c1")}},
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := store.ReadAll(ctx, db, 0, 100)
			out, err := store.AppendMany(ctx, db, tc.writes...)
			after, _ := store.ReadAll(ctx, db, 0, 100)
			if tc.conflict != "" {
				var c *store.ConflictError
				if !errors.As(err, &c) || c.Stream != tc.conflict {
					t.Fatalf("want a conflict on %s, got %v", tc.conflict, err)
				}
				if len(after) != len(before) {
					t.Fatalf("a failed AppendMany stored %d events", len(after)-len(before))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := []struct {
				stream  string
				version int64
			}{{"a", 1}, {"a", 2}, {"b", 2}, {"c", 1}}
			for i, w := range want {
				if out[i].Stream != w.stream || out[i].Version != w.version || out[i].Position == 0 {
					t.Fatalf("result %d: %s v%d pos %d, want %s v%d", i, out[i].Stream, out[i].Version, out[i].Position, w.stream, w.version)
				}
			}
			if out[0].Position >= out[1].Position {
				t.Fatalf("positions out of order within a stream: %d, %d", out[0].Position, out[1].Position)
			}
		})
	}
}

func TestAppendManyRejectsAStreamGivenTwice(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	_, err := store.AppendMany(context.Background(), db,
		store.Write{Stream: "a", Expected: events.NoStream, Events: []events.Envelope{env(t, "a", "1")}},
		store.Write{Stream: "a", Expected: events.NoStream, Events: []events.Envelope{env(t, "a", "2")}},
	)
	if err == nil || store.IsConflict(err) {
		t.Fatalf("want a usage error, got %v", err)
	}
}

func TestLoadMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	if _, err := store.AppendMany(ctx, db,
		store.Write{Stream: "x", Expected: events.NoStream, Events: []events.Envelope{env(t, "x", "1"), env(t, "x", "2")}},
		store.Write{Stream: "y", Expected: events.NoStream, Events: []events.Envelope{env(t, "y", "1")}},
	); err != nil {
		t.Fatal(err)
	}
	got, err := store.LoadMany(ctx, db, "x", "y", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if len(got["x"]) != 2 || got["x"][0].Version != 1 || got["x"][1].Version != 2 || len(got["y"]) != 1 || got["missing"] != nil {
		t.Fatalf("loaded %+v", got)
	}
}

// The signal ticks once the appending transaction is over, never while it
// is still open (a relay woken then would find nothing and sleep).
func TestCommitSignal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	sig := store.WatchCommits(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ticked := func() bool {
		select {
		case <-sig.C():
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	}

	if _, err := pool.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	if ticked() {
		t.Fatal("a query that appends nothing ticked")
	}
	if _, err := store.Append(ctx, pool, "s", events.NoStream, env(t, "s", "a")); err != nil {
		t.Fatal(err)
	}
	if !ticked() {
		t.Fatal("no tick after an append on the pool")
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, tx, "s", 1, env(t, "s", "b")); err != nil {
		t.Fatal(err)
	}
	if ticked() {
		t.Fatal("ticked before the transaction committed")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !ticked() {
		t.Fatal("no tick after the commit")
	}
}

// An event the relay could not publish is refused at append time, naming
// the stream; one that fits is stored.
func TestAppendBoundsEventSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	s, err := store.New(store.Config{MaxEventBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		text  string
		fails bool
	}{
		{"small", "hello", false},
		{"over the limit", strings.Repeat("x", 4096), true},
		// Go escapes <, > and & on the bus: 600 of them take 3,600 bytes.
		{"over the limit once escaped", strings.Repeat("<", 700), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stream := "size-" + tc.name
			_, err := s.Append(ctx, db, stream, events.NoStream, env(t, stream, tc.text))
			var big *store.TooLargeError
			if tc.fails != errors.As(err, &big) {
				t.Fatalf("got %v", err)
			}
			if !tc.fails {
				return
			}
			if big.Stream != stream || !strings.Contains(err.Error(), stream) || big.Bytes <= 4096 || store.IsConflict(err) {
				t.Fatalf("unclear error: %v", err)
			}
			if v, _ := store.Version(ctx, db, stream); v != 0 {
				t.Fatalf("stored the refused event")
			}
		})
	}
	// The package functions apply the default, just under the producer's
	// 1 MiB.
	huge := env(t, "huge", strings.Repeat("x", store.DefaultMaxEventBytes))
	var big *store.TooLargeError
	if _, err := store.Append(ctx, db, "huge", events.NoStream, huge); !errors.As(err, &big) || big.Max != store.DefaultMaxEventBytes {
		t.Fatalf("default limit not applied: %v", err)
	}
	if _, err := store.New(store.Config{MaxEventBytes: 2 << 20}); err == nil {
		t.Fatal("accepted a limit above what the producer can send")
	}
}

// An append that joins a caller's transaction whose id is older than the
// stream's last append conflicts: the relay publishes in transaction-id
// order, so the later version would go out first.
func TestAppendInOlderTransactionConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	older, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback(ctx)
	if _, err := older.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil { // the command's earlier write
		t.Fatal(err)
	}
	younger, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, younger, "s", events.NoStream, env(t, "s", "v1")); err != nil {
		t.Fatal(err)
	}
	if err := younger.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = store.Append(ctx, older, "s", 1, env(t, "s", "v2"))
	if !store.IsConflict(err) {
		t.Fatalf("append in the older transaction: got %v, want a conflict", err)
	}
	_ = older.Rollback(ctx)

	// The retry, in a new transaction, goes through; and a transaction may
	// append to a stream twice.
	retry, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer retry.Rollback(ctx)
	for v := int64(1); v <= 2; v++ {
		if _, err := store.Append(ctx, retry, "s", v, env(t, "s", fmt.Sprint("v", v+1))); err != nil {
			t.Fatal(err)
		}
	}
	if err := retry.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A deadlock or a serialization failure between two appending commands is
// a conflict, so the command retries instead of failing.
func TestLostRacesAreConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	tests := []struct {
		name string
		code string
		race func(t *testing.T, a, b pgx.Tx) (errA, errB error)
	}{
		{"deadlock", "40P01", func(t *testing.T, a, b pgx.Tx) (error, error) {
			mustAppend(t, a, "d-x")
			mustAppend(t, b, "d-y")
			errA := make(chan error, 1)
			go func() { _, err := store.Append(ctx, a, "d-y", events.AnyVersion, env(t, "d-y", "a")); errA <- err }()
			time.Sleep(100 * time.Millisecond) // a waits for b's row
			_, errB := store.Append(ctx, b, "d-x", events.AnyVersion, env(t, "d-x", "b"))
			if errB != nil {
				_ = b.Rollback(ctx) // lets a finish
			}
			return <-errA, errB
		}},
		{"serialization failure", "40001", func(t *testing.T, a, b pgx.Tx) (error, error) {
			if _, err := a.Exec(ctx, `SELECT 1`); err != nil { // a's snapshot
				t.Fatal(err)
			}
			_, errB := store.Append(ctx, b, "s-x", events.NoStream, env(t, "s-x", "b"))
			if errB == nil {
				errB = b.Commit(ctx)
			}
			_, errA := store.Append(ctx, a, "s-x", events.NoStream, env(t, "s-x", "a"))
			return errA, errB
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := pgx.TxOptions{IsoLevel: pgx.Serializable}
			a, err := db.BeginTx(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Rollback(ctx)
			b, err := db.BeginTx(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Rollback(ctx)
			errA, errB := tc.race(t, a, b)
			lost := errA
			if lost == nil {
				lost = errB
			}
			var pg *pgconn.PgError
			if !errors.As(lost, &pg) || pg.Code != tc.code {
				t.Fatalf("the race ended with %v / %v, want one %s", errA, errB, tc.code)
			}
			if !store.IsConflict(lost) {
				t.Fatalf("%s is not a conflict: %v", tc.code, lost)
			}
		})
	}
}

func mustAppend(t *testing.T, db store.DB, stream string) {
	t.Helper()
	if _, err := store.Append(context.Background(), db, stream, events.AnyVersion, env(t, stream, "x")); err != nil {
		t.Fatal(err)
	}
}

// AppendMany inserts in stream order whatever order the command gives, so
// two commands over the same streams queue instead of deadlocking; the
// result keeps the order given.
func TestAppendManyWritesInStreamOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	out, err := store.AppendMany(ctx, db,
		store.Write{Stream: "c", Expected: events.NoStream, Events: []events.Envelope{env(t, "c", "c1"), env(t, "c", "c2")}},
		store.Write{Stream: "a", Expected: events.NoStream, Events: []events.Envelope{env(t, "a", "a1")}},
		store.Write{Stream: "b", Expected: events.NoStream, Events: []events.Envelope{env(t, "b", "b1")}},
	)
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, e := range out {
		got += fmt.Sprintf("%s%d ", e.Stream, e.Version)
	}
	if got != "c1 c2 a1 b1 " {
		t.Fatalf("result order %q, want the order given", got)
	}
	if !(out[2].Position < out[3].Position && out[3].Position < out[0].Position && out[0].Position < out[1].Position) {
		t.Fatalf("inserted out of stream order: a %d, b %d, c %d %d", out[2].Position, out[3].Position, out[0].Position, out[1].Position)
	}
}

// A DB bound to a Store carries its limits into the package functions and
// into whatever appends through them (commands.Execute, every handler).
func TestBoundDBCarriesTheLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	s, err := store.New(store.Config{MaxEventBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("x", 5000)
	var big *store.TooLargeError
	if _, err := store.Append(ctx, s.Bind(db), "bound", events.NoStream, env(t, "bound", text)); !errors.As(err, &big) {
		t.Fatalf("bound: %v, want a TooLargeError", err)
	}
	if _, err := store.AppendMany(ctx, s.Bind(db), store.Write{Stream: "bound-many", Expected: events.NoStream, Events: []events.Envelope{env(t, "bound-many", text)}}); !errors.As(err, &big) {
		t.Fatalf("bound, many: %v, want a TooLargeError", err)
	}
	if _, err := store.Append(ctx, db, "unbound", events.NoStream, env(t, "unbound", text)); err != nil {
		t.Fatalf("unbound, default limit: %v", err)
	}
	// The bound handle is still a DB for reads.
	if v, err := store.Version(ctx, s.Bind(db), "unbound"); err != nil || v != 1 {
		t.Fatalf("read through the bound handle: %d %v", v, err)
	}
}
