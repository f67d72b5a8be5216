package projections_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/projections"
)

// depositedV2 is test.deposited as a newer build writes it: in cents.
type depositedV2 struct {
	Cents int `json:"cents"`
}

func (depositedV2) EventType() string  { return "test.deposited" }
func (depositedV2) SchemaVersion() int { return 2 }
func (depositedV2) Upcasters() []events.Upcaster {
	return []events.Upcaster{func(data json.RawMessage) (json.RawMessage, error) {
		var v1 deposited
		if err := json.Unmarshal(data, &v1); err != nil {
			return nil, err
		}
		return json.Marshal(depositedV2{Cents: v1.Amount * 100})
	}}
}

// withdrawn is a type only the newer build knows.
type withdrawn struct {
	Amount int `json:"amount"`
}

func (withdrawn) EventType() string { return "test.withdrawn" }

// newerBalances is the balances projection of the newer build: the same
// name (so the same consumer group and checkpoints), deposits in cents and
// withdrawals.
func newerBalances() *projections.Projection {
	p := projections.New("balances", "balances")
	add := func(ctx context.Context, tx projections.Tx, env events.Envelope, amount int) error {
		return tx.Exec(ctx, `INSERT INTO balances (account, total, history) VALUES ($1, $2, $3::bigint::text)
			ON CONFLICT (account) DO UPDATE SET total = balances.total + excluded.total, history = balances.history || ',' || excluded.history`,
			env.Stream, amount, env.Version)
	}
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *depositedV2) error {
		return add(ctx, tx, env, e.Cents/100)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *withdrawn) error {
		return add(ctx, tx, env, -e.Amount)
	})
	return p
}

// produceAt publishes env as a build of schema level level would (its
// schema_level header).
func produceAt(t *testing.T, pub outbox.Publisher, c kafka.Config, level int, env events.Envelope) {
	t.Helper()
	m, err := outbox.ToMessage(env)
	if err != nil {
		t.Fatal(err)
	}
	m.Metadata.Set(events.HeaderSchemaLevel, strconv.Itoa(level))
	if err := pub.Publish(c.Topic(kafka.TopicEvents), m); err != nil {
		t.Fatal(err)
	}
}

// Issue 30 point 2: a rolling upgrade of a projection's consumers. The
// old build (a registry with test.deposited at v1 and no test.withdrawn)
// meets events a newer build wrote (test.withdrawn, unknown to it, from a
// higher schema level; test.deposited v2): it applies what comes before
// them, holds the partition there (its checkpoint and offset stay before
// them, /readyz says what it waits for) and leaves the group; the newer
// replica (a registry with both) in the same group takes the partition
// over, and the read model ends complete: no event skipped.
func TestRollingUpgradeOfAProjectionSkipsNothing(t *testing.T) {
	t.Parallel()
	pool, c, oldReg := setup(t, 2)
	c.YieldBackoff = 300 * time.Millisecond
	newReg, err := events.NewRegistry(depositedV2{}, withdrawn{}, unrelated{})
	if err != nil {
		t.Fatal(err)
	}
	signer := testenv.Signer(t)
	pub := publisher(t, c, signer)
	// Streams a..d: two old deposits each, then (from the newer build) a
	// withdrawal and a deposit in cents, then an old deposit again.
	want := map[string]balance{}
	streams := []string{"a", "b", "c", "d"}
	for i, s := range streams {
		produceAt(t, pub, c, 1, envelope(t, s, 1, deposited{10 + i}))
		produceAt(t, pub, c, 1, envelope(t, s, 2, deposited{20}))
		want[s] = balance{10 + i + 20 - 5 + 7 + 1, "1,2,3,4,5"}
	}
	for _, s := range streams {
		produceAt(t, pub, c, 2, envelope(t, s, 3, withdrawn{5}))
		produceAt(t, pub, c, 2, envelope(t, s, 4, depositedV2{Cents: 700}))
		produceAt(t, pub, c, 1, envelope(t, s, 5, deposited{1}))
	}

	old, _ := balances(nil)
	oldRunner, err := projections.NewRunner(projections.Config{Bus: c, Registry: oldReg, Signer: signer, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}, pool, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	oldDone := make(chan error, 1)
	go func() { oldDone <- oldRunner.Run(ctx, projections.Each(old)...) }()
	defer func() {
		cancel()
		if err := <-oldDone; err != nil {
			t.Error(err)
		}
	}()
	for _, s := range streams {
		wait(t, pool, "balances", s, 2)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := oldRunner.Ready(ctx)
		if err != nil && strings.Contains(err.Error(), "waiting for a newer cfgd: test.withdrawn v1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old runner ready: %v, want it waiting for test.withdrawn", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Alone, the old build never passes the withdrawals: nothing skipped.
	time.Sleep(time.Second)
	for s, b := range snapshot(t, pool) {
		if b.History != "1,2" {
			t.Fatalf("old build alone: stream %s applied %s, want 1,2 and a hold", s, b.History)
		}
	}

	// The newer replica joins the same group and takes the partitions
	// over while the old one keeps coming back.
	run(t, pool, projections.Config{Bus: c, Registry: newReg, Signer: signer}, projections.Each(newerBalances())...)
	for _, s := range streams {
		wait(t, pool, "balances", s, 5)
	}
	got := snapshot(t, pool)
	for _, s := range streams {
		if got[s] != want[s] {
			t.Errorf("stream %s: %+v, want %+v", s, got[s], want[s])
		}
	}
	if len(got) != len(streams) {
		t.Errorf("read model %v", got)
	}
}

// A replay reads the event store, which keeps no schema level: an event
// type the old build does not know, or a newer version of one its
// projection handles, stops it (events.ErrNewerSchema) instead of being
// skipped with the checkpoint moved; the newer build applies both.
func TestApplyFromTheStoreRefusesEventsOfANewerBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, oldReg := setup(t, 1)
	newReg, err := events.NewRegistry(depositedV2{}, withdrawn{}, unrelated{})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := balances(nil)
	for i, e := range []events.Event{withdrawn{1}, depositedV2{Cents: 100}} {
		env := envelope(t, "acc", int64(i+1), e)
		var ns *events.ErrNewerSchema
		if _, err := projections.Apply(ctx, pool, oldReg, old, env); !errors.As(err, &ns) || ns.Type != e.EventType() {
			t.Fatalf("the old build applied %s: %v, want it refused for a newer cfgd", e.EventType(), err)
		}
		if got, err := projections.Apply(ctx, pool, newReg, newerBalances(), env); err != nil || got != projections.Applied {
			t.Fatalf("the newer build: %v (%v)", got, err)
		}
	}
	if got := snapshot(t, pool)["acc"]; got != (balance{0, "1,2"}) {
		t.Fatalf("balance %+v", got)
	}
}
