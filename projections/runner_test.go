package projections_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/readmodels/checkpoints"
)

type deposited struct {
	Amount int `json:"amount"`
}

func (deposited) EventType() string { return "test.deposited" }

type unrelated struct{}

func (unrelated) EventType() string { return "test.unrelated" }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// balances is a tiny read model: the sum of deposits per stream, and the
// versions applied in the order they were applied.
func balances(fail func(call int32, e *deposited) error) (*projections.Projection, *atomic.Int32) {
	var calls atomic.Int32
	p := projections.New("balances", "balances")
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *deposited) error {
		if fail != nil {
			if err := fail(calls.Add(1), e); err != nil {
				return err
			}
		}
		err := tx.Exec(ctx, `INSERT INTO balances (account, total, history) VALUES ($1, $2, $3::bigint::text)
			ON CONFLICT (account) DO UPDATE SET total = balances.total + excluded.total, history = balances.history || ',' || excluded.history`,
			env.Stream, e.Amount, env.Version)
		return err
	})
	return p, &calls
}

// failCalls fails the first n handler calls.
func failCalls(n int32) func(int32, *deposited) error {
	return func(call int32, _ *deposited) error {
		if call <= n {
			return errors.New("transient: database hiccup")
		}
		return nil
	}
}

func setup(t *testing.T, partitions int) (*pgxpool.Pool, kafka.Config, *events.Registry) {
	t.Helper()
	pool := testenv.Postgres(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE balances (account text PRIMARY KEY, total int NOT NULL, history text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	c := testenv.Kafka(t, partitions)
	if err := kafka.EnsureTopics(context.Background(), c, testenv.Quiet(), kafka.TopicEvents); err != nil {
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

// envelope builds an event of stream at version without storing it, for
// tests that produce to the topic directly.
func envelope(t *testing.T, stream string, version int64, e events.Event) events.Envelope {
	t.Helper()
	env, err := events.New(stream, e, events.Metadata{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	env.Version = version
	return env
}

// publisher produces to the events topic, signing with s.
func publisher(t *testing.T, c kafka.Config, s *events.Signer) outbox.Publisher {
	t.Helper()
	pub, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return testenv.SigningPublisher(pub, s)
}

func produce(t *testing.T, pub outbox.Publisher, c kafka.Config, envs ...events.Envelope) {
	t.Helper()
	for _, env := range envs {
		m, err := outbox.ToMessage(env)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(c.Topic(kafka.TopicEvents), m); err != nil {
			t.Fatal(err)
		}
	}
}

// run starts a runner until the test ends.
func run(t *testing.T, pool *pgxpool.Pool, cfg projections.Config, groups ...projections.Group) {
	t.Helper()
	runner, err := projections.NewRunner(cfg, pool, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx, groups...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

type balance struct {
	Total   int
	History string
}

func snapshot(t *testing.T, pool *pgxpool.Pool) map[string]balance {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT account, total, history FROM balances`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]balance{}
	for rows.Next() {
		var a string
		var b balance
		if err := rows.Scan(&a, &b.Total, &b.History); err != nil {
			t.Fatal(err)
		}
		out[a] = b
	}
	return out
}

func wait(t *testing.T, pool *pgxpool.Pool, projection, stream string, version int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := checkpoints.Wait(ctx, pool, projection, stream, version); err != nil {
		t.Fatal(err)
	}
}

func TestApplyIsIdempotentAndHoldsGaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, reg := setup(t, 1)
	p, _ := balances(nil)
	envs := appendEvents(t, pool, "acc-1", deposited{5}, unrelated{}, deposited{7})
	// A type the projection does not handle is not decoded (as by the
	// runner): a payload only another projection could read passes.
	odd := envelope(t, "acc-1", 0, unrelated{})
	odd.Data = []byte(`["not", "an", "object"]`)
	stored, err := store.Append(ctx, pool, "acc-1", 3, odd)
	if err != nil {
		t.Fatal(err)
	}
	envs = append(envs, stored...)
	tests := []struct {
		name string
		env  events.Envelope
		want projections.Outcome
	}{
		{"first", envs[0], projections.Applied},
		{"again", envs[0], projections.Duplicate},
		{"v3 before v2", envs[2], projections.Held},
		{"unhandled type moves the checkpoint", envs[1], projections.Ignored},
		{"v3 after v2", envs[2], projections.Applied},
		{"v3 again", envs[2], projections.Duplicate},
		{"v1 late", envs[0], projections.Duplicate},
		{"unhandled type is not decoded", envs[3], projections.Ignored},
	}
	for _, tc := range tests {
		got, err := projections.Apply(ctx, pool, reg, p, tc.env)
		if err != nil || got != tc.want {
			t.Fatalf("%s: got %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
	if got := snapshot(t, pool)["acc-1"]; got != (balance{12, "1,3"}) {
		t.Fatalf("balance %v, want 12 from v1 and v3", got)
	}
}

// The relay publishes the log, then the whole log is published a second
// time (as after a relay crash): the read model must be the same.
func TestRunnerDeliveredTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, c, reg := setup(t, 3)
	p, calls := balances(failCalls(2)) // the first two attempts fail and are retried
	signer := testenv.Signer(t)

	last := map[string]int64{}
	for i := range 20 {
		envs := appendEvents(t, pool, []string{"a", "b", "c"}[i%3], deposited{i}, unrelated{})
		last[envs[1].Stream] = envs[1].Version
	}
	pub := publisher(t, c, signer)
	rl, err := outbox.New(outbox.Config{Topic: c.Topic(kafka.TopicEvents), Signer: signer}, pool, pub, quiet())
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
	run(t, pool, projections.Config{Bus: c, Registry: reg, Signer: signer}, projections.Each(p)...)
	// Unrelated events move the checkpoint too.
	for stream, v := range last {
		wait(t, pool, "balances", stream, v)
	}
	first := snapshot(t, pool)
	want := map[string]int{"a": 0 + 3 + 6 + 9 + 12 + 15 + 18, "b": 1 + 4 + 7 + 10 + 13 + 16 + 19, "c": 2 + 5 + 8 + 11 + 14 + 17}
	for k, v := range want {
		if first[k].Total != v {
			t.Fatalf("first pass: %v, want %v", first, want)
		}
	}

	// Deliver everything again, straight from the store, then one fresh
	// event per stream: once it is applied, the duplicates before it in
	// its partition were consumed.
	all, err := store.ReadAll(ctx, pool, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	produce(t, pub, c, all...)
	for _, acct := range []string{"a", "b", "c"} {
		env := appendEvents(t, pool, acct, deposited{1000})[0]
		produce(t, pub, c, env)
		wait(t, pool, "balances", acct, env.Version)
		want[acct] += 1000
	}
	second := snapshot(t, pool)
	for k, v := range want {
		if second[k].Total != v {
			t.Fatalf("after re-delivery: %v, want %v", second, want)
		}
	}
	if calls.Load() < 22 {
		t.Fatalf("handler ran %d times; the two failures must have been retried", calls.Load())
	}
}

// v1, v3, v2 on the topic give the same read model as v1, v2, v3: v3
// waits for v2 instead of being applied early (and v2 then dropped as an
// old version).
func TestRunnerHoldsOutOfOrderVersions(t *testing.T) {
	t.Parallel()
	pool, c, reg := setup(t, 1)
	signer := testenv.Signer(t)
	p, _ := balances(nil)
	pub := publisher(t, c, signer)
	ordered := []events.Envelope{envelope(t, "in-order", 1, deposited{1}), envelope(t, "in-order", 2, deposited{10}), envelope(t, "in-order", 3, deposited{100})}
	swapped := []events.Envelope{envelope(t, "swapped", 1, deposited{1}), envelope(t, "swapped", 3, deposited{100}), envelope(t, "swapped", 2, deposited{10})}
	produce(t, pub, c, ordered...)
	produce(t, pub, c, swapped[:2]...)
	run(t, pool, projections.Config{Bus: c, Registry: reg, Signer: signer, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		projections.Each(p)...)
	wait(t, pool, "balances", "in-order", 3)
	time.Sleep(200 * time.Millisecond) // v3 has been seen and is held
	if got := snapshot(t, pool)["swapped"]; got != (balance{1, "1"}) {
		t.Fatalf("before v2: %v, want only v1 applied", got)
	}
	produce(t, pub, c, swapped[2])
	wait(t, pool, "balances", "swapped", 3)
	got := snapshot(t, pool)
	if got["swapped"] != got["in-order"] || got["swapped"] != (balance{111, "1,2,3"}) {
		t.Fatalf("read model %v, want both streams at 111 applied as 1,2,3", got)
	}
}

// A handler fails on an event in the middle of a batch: the batch rolls
// back and is applied again, so nothing is applied twice or lost.
func TestRunnerBatchFailingHalfWay(t *testing.T) {
	t.Parallel()
	pool, c, reg := setup(t, 1)
	signer := testenv.Signer(t)
	var failed atomic.Int32
	p, calls := balances(func(call int32, e *deposited) error {
		if e.Amount == 150 && failed.Add(1) <= 2 {
			return errors.New("transient: lost a lock")
		}
		return nil
	})
	pub := publisher(t, c, signer)
	streams := []string{"s0", "s1", "s2", "s3", "s4"}
	var envs []events.Envelope
	want := map[string]balance{}
	for i := range 300 {
		s := streams[i%len(streams)]
		v := int64(i/len(streams) + 1)
		envs = append(envs, envelope(t, s, v, deposited{i}))
		b := want[s]
		b.Total += i
		b.History = strings.TrimPrefix(b.History+","+fmt.Sprint(v), ",")
		want[s] = b
	}
	produce(t, pub, c, envs...)
	run(t, pool, projections.Config{Bus: c, Registry: reg, Signer: signer, BatchSize: 100, Backoff: 10 * time.Millisecond},
		projections.Each(p)...)
	for _, s := range streams {
		wait(t, pool, "balances", s, 60)
	}
	if got := snapshot(t, pool); !mapsEqual(got, want) {
		t.Fatalf("read model %v\nwant %v", got, want)
	}
	if failed.Load() < 2 || calls.Load() <= 300 {
		t.Fatalf("the failing event failed %d times over %d calls: the batch was never retried", failed.Load(), calls.Load())
	}
}

func mapsEqual(a, b map[string]balance) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// An event whose handler always fails, and one whose payload does not
// decode, go to the dead-letter topic; the events after them in their
// streams are applied, and `cfgd deadletters list` shows both.
func TestRunnerDeadLettersPoisonEvents(t *testing.T) {
	t.Parallel()
	pool, c, reg := setup(t, 1)
	signer := testenv.Signer(t)
	p, _ := balances(func(_ int32, e *deposited) error {
		if e.Amount == 666 {
			return errors.New("constraint says no")
		}
		return nil
	})
	pub := publisher(t, c, signer)
	bad := envelope(t, "b", 1, deposited{})
	bad.Data = []byte(`{"amount":"not a number"}`)
	produce(t, pub, c,
		envelope(t, "a", 1, deposited{1}), envelope(t, "a", 2, deposited{666}), envelope(t, "a", 3, deposited{2}),
		bad, envelope(t, "b", 2, deposited{3}))
	metrics := prometheus.NewRegistry()
	run(t, pool, projections.Config{Bus: c, Registry: reg, Signer: signer, Metrics: metrics,
		BatchAttempts: 2, EventAttempts: 2, Backoff: 5 * time.Millisecond}, projections.Each(p)...)
	wait(t, pool, "balances", "a", 3)
	wait(t, pool, "balances", "b", 2)
	if got := snapshot(t, pool); !mapsEqual(got, map[string]balance{"a": {3, "1,3"}, "b": {3, "2"}}) {
		t.Fatalf("read model %v", got)
	}
	dls, err := projections.ReadDeadLetters(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		projection, stream string
		version            int64
		reason             string
	}
	var got []row
	for _, d := range dls {
		got = append(got, row{d.Projection, d.Stream, d.Version, d.Reason})
		if d.Topic != c.Topic(kafka.TopicEvents) || len(d.Body) == 0 {
			t.Fatalf("dead letter lacks its origin or body: %+v", d)
		}
	}
	// The payload is decoded before the batch is applied, so its dead
	// letter comes first.
	want := []row{{"balances", "b", 1, projections.ReasonUndecodable}, {"balances", "a", 2, projections.ReasonHandler}}
	if !slices.Equal(got, want) {
		t.Fatalf("dead letters %v, want %v", got, want)
	}
	for _, w := range want {
		if n := deadLetterCount(t, metrics, w.projection, w.reason); n != 1 {
			t.Fatalf("deadletters metric for %s = %v, want 1", w.reason, n)
		}
	}
	var out strings.Builder
	if err := projections.ListDeadLetters(context.Background(), c, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "\tbalances\ta\t2\ttest.deposited\thandler_error\t") ||
		!strings.Contains(lines[0], "\tbalances\tb\t1\ttest.deposited\tundecodable\t") {
		t.Fatalf("list:\n%s", out.String())
	}
}

func deadLetterCount(t *testing.T, reg *prometheus.Registry, projection, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cfgd_projection_deadletters_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["projection"] == projection && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestListDeadLettersWithoutTopic(t *testing.T) {
	t.Parallel()
	c := testenv.Kafka(t, 1)
	var out strings.Builder
	if err := projections.ListDeadLetters(context.Background(), c, &out); err != nil || out.Len() != 0 {
		t.Fatalf("got %q, %v; want nothing", out.String(), err)
	}
}

func TestRunnerConfigValidate(t *testing.T) {
	t.Parallel()
	reg, _ := events.NewRegistry(deposited{})
	tests := []struct {
		name string
		cfg  projections.Config
		want []string
	}{
		{"empty", projections.Config{}, []string{"no brokers", "no event registry", "no event signer"}},
		{"no signer", projections.Config{Bus: kafka.Config{Brokers: []string{"x:1"}, Partitions: 1}, Registry: reg}, []string{"no event signer"}},
		{"negative backoff", projections.Config{Bus: kafka.Config{Brokers: []string{"x:1"}, Partitions: 1}, Registry: reg, Signer: testenv.Signer(t), Backoff: -1}, []string{"backoff"}},
	}
	for _, tc := range tests {
		_, err := projections.NewRunner(tc.cfg, nil, quiet())
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: error %v, want it to mention %q", tc.name, err, w)
			}
		}
	}
}
