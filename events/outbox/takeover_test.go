package outbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/events/store"
)

// Chaos finding 10 (seed 617878197): the relay's leader was killed 40 ms
// after publishing a sign-up's first event, before it saved its
// checkpoint; the next leader resumed from the saved checkpoint and
// published the event again. Here a former leader published some of the
// stored events and died with no checkpoint saved: the next leader must
// publish the others, and nothing a second time. The topic has one
// partition, so the order of the records is the order of publishing.
func TestNewLeaderPublishesOnlyWhatTheFormerOneDidNot(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		streams []string // appended in turn, an event each
		former  func(i int, stream string) bool
		want    string // the streams of the records on the topic, in order
	}{
		{"a hole: its publish of b failed, c went in",
			[]string{"a", "a", "b", "c"}, func(_ int, s string) bool { return s != "b" }, "a a c b"},
		{"killed half way",
			[]string{"a", "b", "c", "d"}, func(i int, _ string) bool { return i < 2 }, "a b c d"},
		{"200 published past the checkpoint: read back in chunks",
			append(slices.Repeat([]string{"a"}, 200), "z"), func(_ int, s string) bool { return s == "a" },
			strings.Repeat("a ", 200) + "z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool, bus := setup(t, 1)
			for _, s := range c.streams {
				appendN(t, pool, s, 0, 1)
			}
			if got := takeOver(t, pool, bus, len(c.streams), c.former); got != c.want {
				t.Fatalf("the topic holds the events of streams %q, want %q", got, c.want)
			}
		})
	}
}

// takeOver publishes the stored events former picks, as a relay leader
// killed before it saved a checkpoint would have, then runs a relay until
// it has caught up, and returns the streams of the topic's records.
func takeOver(t *testing.T, pool *pgxpool.Pool, c kafka.Config, stored int, former func(i int, stream string) bool) string {
	t.Helper()
	ctx := context.Background()
	all, err := store.ReadAll(ctx, pool, 0, stored)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	signer := testenv.Signer(t)
	for i, e := range all {
		if !former(i, e.Stream) {
			continue
		}
		m, err := outbox.SignedMessage(signer, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(c.Topic(kafka.TopicEvents), m); err != nil {
			t.Fatal(err)
		}
	}
	r, err := outbox.New(outbox.Config{Topic: c.Topic(kafka.TopicEvents), Signer: signer, Idle: 20 * time.Millisecond,
		OpenTail: func() (outbox.Tail, error) { return kafka.NewReader(c) }}, pool, pub, quiet())
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	for deadline := time.Now().Add(30 * time.Second); ; {
		lag, err := r.Lag(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay lag %d after 30 s", lag)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a second copy, if any, is on its way
	ends, err := kafka.NewReader(c)
	if err != nil {
		t.Fatal(err)
	}
	defer ends.Close()
	end, err := ends.Ends(c.Topic(kafka.TopicEvents))
	if err != nil {
		t.Fatal(err)
	}
	msgs := testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), int(end[0]), 30*time.Second)
	var got []string
	for _, m := range msgs {
		e, err := events.Unmarshal(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Stream)
	}
	return strings.Join(got, " ")
}
