package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/events/store"
)

// consumerView is what a consumer that applies only the next version of
// each stream, and drops any other, ends up with: per stream, event ids in
// the order applied.
func consumerView(t *testing.T, msgs []*sarama.ConsumerMessage) map[string][]string {
	t.Helper()
	view := map[string][]string{}
	for _, m := range msgs {
		e, err := events.Unmarshal(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		if e.Version == int64(len(view[e.Stream]))+1 {
			view[e.Stream] = append(view[e.Stream], e.ID.String())
		}
	}
	return view
}

// storeView is every stream of the store, event ids in version order.
func storeView(t *testing.T, pool *pgxpool.Pool) (map[string][]string, int) {
	t.Helper()
	all, err := store.ReadAll(context.Background(), pool, 0, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	view := map[string][]string{}
	for _, e := range all {
		view[e.Stream] = append(view[e.Stream], e.ID.String())
	}
	for s, ids := range view {
		loaded, err := store.Load(context.Background(), pool, s)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range loaded {
			ids[i] = e.ID.String()
		}
	}
	return view, len(all)
}

func sameView(t *testing.T, got, want map[string][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("consumer saw %d streams, the store has %d", len(got), len(want))
	}
	for s, ids := range want {
		if fmt.Sprint(got[s]) != fmt.Sprint(ids) {
			t.Fatalf("stream %s: the consumer's view differs from the store: %d events applied, the store holds %d", s, len(got[s]), len(ids))
		}
	}
}

// gappyPublisher stores every message of the first batch longer than fail
// but the one at fail, as sarama's producer does when one record fails and
// later ones succeed, and reports that as a partial failure. (A batch can
// be short while another test's transaction holds the xmin back.)
type gappyPublisher struct {
	inner    outbox.Publisher
	fail     int
	batchLen atomic.Int64 // of the batch with the hole, once sent
}

func (p *gappyPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.fail >= len(msgs) || !p.batchLen.CompareAndSwap(0, int64(len(msgs))) {
		return p.inner.Publish(topic, msgs...)
	}
	if err := p.inner.Publish(topic, msgs[:p.fail]...); err != nil {
		return err
	}
	if err := p.inner.Publish(topic, msgs[p.fail+1:]...); err != nil {
		return err
	}
	return &kafka.PublishError{Failed: []int{p.fail}, Total: len(msgs), Err: errors.New("injected: record too large")}
}

// A batch that Kafka stored with a hole in the middle: the relay keeps what
// came before the hole and publishes again from it, so a consumer that
// applies each stream's next version only ends up equal to the store, and
// nothing before the hole is sent twice.
func TestPartlyFailedBatchRepublishesFromTheFirstFailure(t *testing.T) {
	t.Parallel()
	const perStream, batch, fail = 20, 40, 5
	for _, mode := range []string{"step", "run"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, c := setup(t, 2)
			for i := range perStream { // a1 b1 a2 b2 ...
				appendN(t, pool, "a", i, 1)
				appendN(t, pool, "b", i, 1)
			}
			real, err := kafka.NewPublisher(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = real.Close() })
			pub := &gappyPublisher{inner: real, fail: fail}
			r := newRelay(t, pool, c, pub, batch)
			switch mode {
			case "step":
				// Steps find less, or nothing, while another test holds
				// the xmin back.
				published := 0
				n, err := r.Step(ctx)
				for deadline := time.Now().Add(30 * time.Second); err == nil && time.Now().Before(deadline); {
					published += n
					time.Sleep(10 * time.Millisecond)
					n, err = r.Step(ctx)
				}
				var pe *kafka.PublishError
				if !errors.As(err, &pe) || n != fail {
					t.Fatalf("partial step: %d published (%v), want %d and the publish error", n, err, fail)
				}
				published += n
				if got, err := stepUntil(t, r, 2*perStream-published); err != nil || got != 2*perStream-published {
					t.Fatalf("after the failure: published %d (%v), want %d", got, err, 2*perStream-published)
				}
			case "run":
				runRelay(t, r)
			}
			want, total := storeView(t, pool)
			// Kafka holds every event once, and those after the hole in its
			// batch twice: before the hole was filled, and after.
			var twice int
			for deadline := time.Now().Add(30 * time.Second); pub.batchLen.Load() == 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if l := int(pub.batchLen.Load()); l > 0 {
				twice = l - fail - 1
			} else {
				t.Fatalf("no batch longer than %d to inject the failure in", fail)
			}
			msgs := testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), total+twice, 30*time.Second)
			if len(msgs) != total+twice {
				t.Fatalf("%d records on the topic, want %d: every event once, the %d after the hole twice", len(msgs), total+twice, twice)
			}
			sameView(t, consumerView(t, msgs), want)
		})
	}
}

// lockHolder finds the backend that holds the relay lock of this database.
func lockHolder(t *testing.T, pool *pgxpool.Pool) (pid int32, ok bool) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = hashtext('cfgd-relay')::oid AND objid = hashtext('events')::oid`).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return pid, true
}

// countingPublisher counts Publish calls, each taking a little while.
type countingPublisher struct {
	inner outbox.Publisher
	delay time.Duration
	calls atomic.Int64
}

func (p *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.calls.Add(1)
	time.Sleep(p.delay)
	return p.inner.Publish(topic, msgs...)
}

// The leader's lock connection dies while it is busy; the test takes the
// lock at once, as a second relay would. The old leader must stop
// publishing within one step and must not save its checkpoint (not even
// the save at stop), and, once it leads again, deliver everything. The
// leader saves only at stop here (SaveEvery is long), so each fence, the
// one before a publish and the one in the save, is tested on its own.
func TestLeaderThatLostItsLockStopsWithinAStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, c := setup(t, 2)
	for s := range 4 {
		appendN(t, pool, fmt.Sprint("s-", s), 0, 500)
	}
	real, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = real.Close() })
	pub := &countingPublisher{inner: real, delay: 5 * time.Millisecond}
	r, err := outbox.New(outbox.Config{Topic: c.Topic(kafka.TopicEvents), BatchSize: 10, SaveEvery: time.Hour, Signer: testenv.Signer(t)}, pool, pub, quiet())
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	for pub.calls.Load() < 5 {
		time.Sleep(5 * time.Millisecond)
	}
	checkpoint := func() (pos int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT position FROM relay_checkpoints), -1)`).Scan(&pos); err != nil {
			t.Fatal(err)
		}
		return pos
	}
	ckBefore := checkpoint()
	pid, ok := lockHolder(t, pool)
	if !ok {
		t.Fatal("the running relay holds no lock")
	}
	rival, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Release()
	if _, err := rival.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if _, err := rival.Exec(ctx, `SELECT pg_advisory_lock(hashtext('cfgd-relay'), hashtext('events'))`); err != nil {
		t.Fatal(err)
	}
	took := pub.calls.Load()
	time.Sleep(500 * time.Millisecond) // a hundred steps of the busy leader
	if extra := pub.calls.Load() - took; extra > 1 {
		t.Fatalf("the old leader published %d more batches after losing its lock", extra)
	}
	if ckAfter := checkpoint(); ckAfter != ckBefore {
		t.Fatalf("the old leader moved the checkpoint from %d to %d after losing its lock", ckBefore, ckAfter)
	}
	if _, err := rival.Exec(ctx, `SELECT pg_advisory_unlock(hashtext('cfgd-relay'), hashtext('events'))`); err != nil {
		t.Fatal(err)
	}
	want, _ := storeView(t, pool)
	// The relay re-sends what came after its last saved checkpoint, so the
	// topic holds duplicates: read until the consumer's view is whole.
	msgs := testenv.ReadTopicUntil(t, c, c.Topic(kafka.TopicEvents), complete(t, want), 30*time.Second)
	sameView(t, consumerView(t, msgs), want)
}

// complete returns a check of whether a consumer applying the records
// read so far has every event of want; it applies each record once.
func complete(t *testing.T, want map[string][]string) func([]*sarama.ConsumerMessage) bool {
	applied := map[string]int64{}
	seen, missing := 0, 0
	for _, ids := range want {
		missing += len(ids)
	}
	return func(msgs []*sarama.ConsumerMessage) bool {
		for ; seen < len(msgs); seen++ {
			e, err := events.Unmarshal(msgs[seen].Value)
			if err != nil {
				t.Fatal(err)
			}
			if e.Version == applied[e.Stream]+1 {
				applied[e.Stream] = e.Version
				missing--
			}
		}
		return missing == 0
	}
}

// exclusivePublisher is shared by two relays; it records any moment when
// both publish, and which relays ever published.
type exclusivePublisher struct {
	inner    outbox.Publisher
	active   atomic.Int32
	overlaps atomic.Int32
	mu       sync.Mutex
	by       map[string]int
}

type asRelay struct {
	p    *exclusivePublisher
	name string
}

func (a asRelay) Publish(topic string, msgs ...*message.Message) error {
	if a.p.active.Add(1) > 1 {
		a.p.overlaps.Add(1)
	}
	defer a.p.active.Add(-1)
	a.p.mu.Lock()
	a.p.by[a.name]++
	a.p.mu.Unlock()
	time.Sleep(3 * time.Millisecond)
	return a.p.inner.Publish(topic, msgs...)
}

// Two relays on one database, events arriving all along: only one ever
// publishes, and never both at once.
func TestTwoRelaysNeverPublishTogether(t *testing.T) {
	t.Parallel()
	pool, c := setup(t, 2)
	real, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = real.Close() })
	shared := &exclusivePublisher{inner: real, by: map[string]int{}}
	for _, name := range []string{"one", "two"} {
		r, err := outbox.New(outbox.Config{Topic: c.Topic(kafka.TopicEvents), BatchSize: 5, Idle: 5 * time.Millisecond, Signer: testenv.Signer(t)},
			pool, asRelay{p: shared, name: name}, quiet())
		if err != nil {
			t.Fatal(err)
		}
		runRelay(t, r)
	}
	const n = 300
	for i := range n {
		appendN(t, pool, fmt.Sprint("s-", i%3), i/3, 1)
		if i%10 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	msgs := testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), n, 30*time.Second)
	want, _ := storeView(t, pool)
	sameView(t, consumerView(t, msgs), want)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if len(shared.by) != 1 || shared.overlaps.Load() != 0 {
		t.Fatalf("publishes by relay %v, %d overlapping; want one relay only", shared.by, shared.overlaps.Load())
	}
}

// Commit order in both arrangements of two transactions. The relay cursor
// is (tx_id, position); by position alone, the arrangement where the
// transaction with the lower id holds the higher position and commits
// first would lose the other transaction's event.
func TestCommitOrderArrangements(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// lowerHasHigherPosition: the lower-id transaction appends second.
		lowerHasHigherPosition bool
		lowerCommitsFirst      bool
	}{
		{"lower id, lower position, commits last", false, false},
		{"lower id, lower position, commits first", false, true},
		{"lower id, higher position, commits first", true, true},
		{"lower id, higher position, commits last", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, c := setup(t, 2)
			r := newRelay(t, pool, c, nil, 100)
			lower, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lower.Rollback(ctx)
			if _, err := lower.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
				t.Fatal(err)
			}
			higher, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer higher.Rollback(ctx)
			if _, err := higher.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
				t.Fatal(err)
			}
			first, second := lower, higher
			if tc.lowerHasHigherPosition {
				first, second = higher, lower
			}
			appendN(t, first, "first", 0, 1)
			appendN(t, second, "second", 0, 1)

			early, late := higher, lower
			if tc.lowerCommitsFirst {
				early, late = lower, higher
			}
			if err := early.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			published := 0
			if tc.lowerCommitsFirst {
				// Below the other transaction's id: visible to the relay now.
				n, err := stepUntil(t, r, 1)
				if err != nil || n != 1 {
					t.Fatalf("published %d (%v) after the first commit, want 1", n, err)
				}
				published = n
			} else if n, err := r.Step(ctx); err != nil || n != 0 {
				t.Fatalf("published %d (%v) while an older transaction was open, want 0", n, err)
			}
			if err := late.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			n, err := stepUntil(t, r, 2-published)
			if err != nil || published+n != 2 {
				t.Fatalf("published %d of 2 (%v)", published+n, err)
			}
			checkDelivered(t, pool, c, 2)
		})
	}
}

// Every message carries the HMAC of its body under the relay's key.
func TestRelaySignsEveryMessage(t *testing.T) {
	t.Parallel()
	pool, c := setup(t, 2)
	appendN(t, pool, "s", 0, 5)
	r := newRelay(t, pool, c, nil, 2)
	if n, err := stepUntil(t, r, 5); err != nil || n != 5 {
		t.Fatalf("published %d (%v)", n, err)
	}
	signer := testenv.Signer(t)
	other, err := events.NewSigner(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	msgs := testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), 5, 10*time.Second)
	if len(msgs) != 5 {
		t.Fatalf("%d messages", len(msgs))
	}
	for _, m := range msgs {
		sig := ""
		for _, h := range m.Headers {
			if string(h.Key) == events.HeaderSignature {
				sig = string(h.Value)
			}
		}
		if err := signer.Verify(m.Value, sig); err != nil {
			t.Fatalf("message at offset %d: %v", m.Offset, err)
		}
		if other.Verify(m.Value, sig) == nil {
			t.Fatal("signature verifies under another key")
		}
		tampered := bytes.Replace(m.Value, []byte(`"n":`), []byte(`"n": `), 1)
		if signer.Verify(tampered, sig) == nil {
			t.Fatal("signature verifies a changed body")
		}
	}
	if _, err := outbox.New(outbox.Config{Topic: "t"}, pool, nil, quiet()); err == nil {
		t.Fatal("a relay without a signer was built")
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// syncBuffer is a log sink a relay goroutine writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A checkpoint above the cluster's transaction ids (the database restored
// into a new cluster) would silently publish nothing new; the relay says so
// in its log, a metric and its readiness check, and recovers when the
// checkpoint is reset.
func TestCheckpointAheadOfTheClusterIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, c := setup(t, 2)
	appendN(t, pool, "s", 0, 1)
	if _, err := pool.Exec(ctx, `INSERT INTO relay_checkpoints (name, tx_id, position)
		VALUES ('events', (pg_snapshot_xmax(pg_current_snapshot())::text::bigint + 1000000)::text::xid8, 0)`); err != nil {
		t.Fatal(err)
	}
	p, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	r, err := outbox.New(outbox.Config{Topic: c.Topic(kafka.TopicEvents), Idle: 10 * time.Millisecond, Metrics: reg, Signer: testenv.Signer(t)},
		pool, p, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	deadline := time.Now().Add(5 * time.Second)
	for !bytes.Contains([]byte(logs.String()), []byte("level=ERROR")) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !bytes.Contains([]byte(logs.String()), []byte("CHECKPOINT IS AHEAD")) {
		t.Fatalf("nothing loud in the log: %s", logs.String())
	}
	if got := gauge(t, reg, "cfgd_relay_checkpoint_ahead"); got != 1 {
		t.Fatalf("cfgd_relay_checkpoint_ahead = %v, want 1", got)
	}
	if err := r.Ready(ctx); err == nil || process.ReasonOf(err) != process.CheckpointAhead {
		t.Fatalf("ready with a checkpoint ahead of the cluster: %v (reason %q)", err, process.ReasonOf(err))
	}
	// The operator resets the checkpoint; the running relay notices.
	if _, err := pool.Exec(ctx, `DELETE FROM relay_checkpoints`); err != nil {
		t.Fatal(err)
	}
	if got := testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), 1, 15*time.Second); len(got) != 1 {
		t.Fatalf("%d events published after the reset, want 1", len(got))
	}
	if err := r.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gauge(t, reg, "cfgd_relay_checkpoint_ahead"); got != 0 {
		t.Fatalf("cfgd_relay_checkpoint_ahead = %v after the reset, want 0", got)
	}
}

// How long committed events wait behind an open transaction is a metric,
// back to 0 once they are published.
func TestHeldBackTimeIsExposed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, c := setup(t, 2)
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	appendN(t, pool, "s", 0, 1)
	p, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	reg := prometheus.NewRegistry()
	r, err := outbox.New(outbox.Config{Topic: c.Topic(kafka.TopicEvents), Idle: 10 * time.Millisecond, Metrics: reg, Signer: testenv.Signer(t)}, pool, p, quiet())
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	// The gauge grows while the open transaction holds the event back; on a
	// loaded machine the relay may take a while to start, so wait for it to
	// pass 0.3 s rather than sleeping a fixed time.
	deadline := time.Now().Add(10 * time.Second)
	for got := gauge(t, reg, "cfgd_relay_held_back_seconds"); got < 0.3; got = gauge(t, reg, "cfgd_relay_held_back_seconds") {
		if time.Now().After(deadline) {
			t.Fatalf("held back %.3fs after 10s behind an open transaction", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, c, 1)
	deadline = time.Now().Add(5 * time.Second)
	for gauge(t, reg, "cfgd_relay_held_back_seconds") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("held-back time not reset after the events went out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A leader that is behind the stored checkpoint (another leader moved it
// on) must not move it back.
func TestCheckpointNeverMovesBackwards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, c := setup(t, 2)
	appendN(t, pool, "s", 0, 400) // one transaction
	real, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = real.Close() })
	pub := &countingPublisher{inner: real, delay: 5 * time.Millisecond}
	r, err := outbox.New(outbox.Config{Topic: c.Topic(kafka.TopicEvents), BatchSize: 10, SaveEvery: time.Millisecond, Signer: testenv.Signer(t)}, pool, pub, quiet())
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	for pub.calls.Load() < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	const ahead = int64(1) << 40 // past every event of the transaction
	if _, err := pool.Exec(ctx, `INSERT INTO relay_checkpoints (name, tx_id, position) VALUES ('events', (SELECT max(tx_id) FROM events), $1)
		ON CONFLICT (name) DO UPDATE SET tx_id = excluded.tx_id, position = excluded.position`, ahead); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // dozens of the leader's saves
	var pos int64
	if err := pool.QueryRow(ctx, `SELECT position FROM relay_checkpoints`).Scan(&pos); err != nil {
		t.Fatal(err)
	}
	if pos != ahead {
		t.Fatalf("the checkpoint moved back from %d to %d", ahead, pos)
	}
}
