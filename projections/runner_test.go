package projections_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/deploy/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/bus"
	"github.com/cfgd/cfgd/events/relay"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/projections"
)

type deposited struct {
	Amount int `json:"amount"`
}

func (deposited) EventType() string { return "test.deposited" }

type unrelated struct{}

func (unrelated) EventType() string { return "test.unrelated" }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// balances is a tiny read model: the sum of deposits per stream.
func balances(failFirst int32) (*projections.Projection, *atomic.Int32) {
	var calls atomic.Int32
	p := projections.New("balances")
	projections.On(p, func(ctx context.Context, tx pgx.Tx, env events.Envelope, e *deposited) error {
		if calls.Add(1) <= failFirst {
			return errors.New("transient: database hiccup")
		}
		_, err := tx.Exec(ctx, `INSERT INTO balances (account, total) VALUES ($1, $2)
			ON CONFLICT (account) DO UPDATE SET total = balances.total + excluded.total`, env.Stream, e.Amount)
		return err
	})
	return p, &calls
}

func setup(t *testing.T) (*pgxpool.Pool, bus.Config, *events.Registry) {
	t.Helper()
	pool := testenv.Postgres(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE balances (account text PRIMARY KEY, total int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	c := testenv.Kafka(t, 3)
	if err := bus.EnsureTopics(context.Background(), c, testenv.Quiet(), bus.TopicEvents); err != nil {
		t.Fatal(err)
	}
	reg, err := events.NewRegistry(deposited{}, unrelated{})
	if err != nil {
		t.Fatal(err)
	}
	return pool, c, reg
}

func appendEvents(t *testing.T, pool *pgxpool.Pool, stream string, evs ...events.Event) []events.Envelope {
	t.Helper()
	var envs []events.Envelope
	for _, e := range evs {
		env, err := events.New(stream, e, events.Metadata{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	out, err := store.Append(context.Background(), pool, stream, events.AnyVersion, envs...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func snapshot(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT account, total FROM balances`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var a string
		var n int
		if err := rows.Scan(&a, &n); err != nil {
			t.Fatal(err)
		}
		out[a] = n
	}
	return out
}

func TestApplyIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, reg := setup(t)
	p, _ := balances(0)
	envs := appendEvents(t, pool, "acc-1", deposited{5}, unrelated{}, deposited{7})
	tests := []struct {
		env  events.Envelope
		want projections.Outcome
	}{
		{envs[0], projections.Applied},
		{envs[0], projections.Duplicate},
		{envs[1], projections.Ignored},
		{envs[2], projections.Applied},
		{envs[2], projections.Duplicate},
		{envs[0], projections.Duplicate},
	}
	for i, tc := range tests {
		got, err := projections.Apply(ctx, pool, reg, p, tc.env)
		if err != nil || got != tc.want {
			t.Fatalf("step %d: got %v (%v), want %v", i, got, err, tc.want)
		}
	}
	if got := snapshot(t, pool); got["acc-1"] != 12 {
		t.Fatalf("balance %v, want 12", got)
	}
}

// The relay publishes the log, then the whole log is published a second
// time (as after a relay crash): the read model must be the same.
func TestRunnerDeliveredTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, c, reg := setup(t)
	p, calls := balances(2) // the first two attempts fail and are retried

	var last events.Envelope
	for i := range 20 {
		envs := appendEvents(t, pool, []string{"a", "b", "c"}[i%3], deposited{i}, unrelated{})
		last = envs[len(envs)-1]
	}
	pub, err := bus.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	rl, err := relay.New(relay.Config{Topic: c.Topic(bus.TopicEvents)}, pool, pub, quiet())
	if err != nil {
		t.Fatal(err)
	}
	for published := 0; published < 40; {
		n, err := rl.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		published += n
	}
	runner, err := projections.NewRunner(pool, reg, c, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx, p) }()

	wait, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := waitLastDeposit(wait, pool, last); err != nil {
		t.Fatal(err)
	}
	first := snapshot(t, pool)
	want := map[string]int{"a": 0 + 3 + 6 + 9 + 12 + 15 + 18, "b": 1 + 4 + 7 + 10 + 13 + 16 + 19, "c": 2 + 5 + 8 + 11 + 14 + 17}
	for k, v := range want {
		if first[k] != v {
			t.Fatalf("first pass: %v, want %v", first, want)
		}
	}

	// Deliver everything again, straight from the store.
	all, err := store.ReadAll(ctx, pool, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		m, err := relay.ToMessage(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(c.Topic(bus.TopicEvents), m); err != nil {
			t.Fatal(err)
		}
	}
	// A marker event published after the duplicates tells us the runner has
	// consumed past them.
	marker := appendEvents(t, pool, "a", deposited{1000})[0]
	m, _ := relay.ToMessage(marker)
	if err := pub.Publish(c.Topic(bus.TopicEvents), m); err != nil {
		t.Fatal(err)
	}
	for _, acct := range []string{"a", "b", "c"} {
		// Each partition is consumed in order; a fresh event per stream marks
		// that the duplicates before it were consumed.
		if acct != "a" {
			env := appendEvents(t, pool, acct, deposited{0})[0]
			m, _ := relay.ToMessage(env)
			if err := pub.Publish(c.Topic(bus.TopicEvents), m); err != nil {
				t.Fatal(err)
			}
			if err := projections.Wait(wait, pool, "balances", acct, env.Version); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := projections.Wait(wait, pool, "balances", "a", marker.Version); err != nil {
		t.Fatal(err)
	}
	second := snapshot(t, pool)
	want["a"] += 1000
	for k, v := range want {
		if second[k] != v {
			t.Fatalf("after re-delivery: %v, want %v", second, want)
		}
	}
	if calls.Load() < 22 {
		t.Fatalf("handler ran %d times; the two failures must have been retried", calls.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func waitLastDeposit(ctx context.Context, pool *pgxpool.Pool, last events.Envelope) error {
	// The last appended event is unrelated (not checkpointed), so wait for the
	// deposit just before it.
	return projections.Wait(ctx, pool, "balances", last.Stream, last.Version-1)
}
