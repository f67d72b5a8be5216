package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events/kafka"
)

// produceN sends n records "0".."n-1" to topic (a name before the prefix),
// keyed so they spread over the partitions.
func produceN(t *testing.T, c kafka.Config, topic string, from, n int) {
	t.Helper()
	ctx := context.Background()
	if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), topic); err != nil {
		t.Fatal(err)
	}
	p, err := kafka.NewProducer(c, kafka.ProducerOptions{}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		v := fmt.Sprint(from + i)
		msgs[i] = &sarama.ProducerMessage{Topic: c.Topic(topic), Key: sarama.StringEncoder(v), Value: sarama.StringEncoder(v)}
	}
	if err := p.Send(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// store is what a handler applies to: the values it holds, each once.
type store struct {
	mu      sync.Mutex
	got     map[string]int
	batches []int
}

func newStore() *store { return &store{got: map[string]int{}} }

func (s *store) add(b *kafka.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range b.Messages {
		s.got[string(m.Value)]++
	}
	s.batches = append(s.batches, len(b.Messages))
}

func (s *store) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (s *store) dupes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.got {
		n += c - 1
	}
	return n
}

// run starts Consume; stop cancels it and returns its error.
func run(t *testing.T, c kafka.Config, group, topic string, h kafka.Handler, opts ...kafka.ConsumeOption) (stop func() error, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	finished := make(chan struct{})
	var err error
	go func() {
		err = kafka.Consume(ctx, c, group, []string{topic}, h, append(opts, kafka.WithLog(testenv.Quiet()))...)
		close(finished)
		ch <- err
	}()
	stop = func() error {
		cancel()
		<-finished
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop, ch
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every record is applied once, in batches of one partition or of all,
// and the committed offsets mean a second run of the group reads nothing
// again.
func TestConsumeAppliesEveryRecordAndCommitsAfterTheStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []kafka.ConsumeOption
	}{
		{"per partition, greedy", []kafka.ConsumeOption{kafka.WithBatch(50, 0)}},
		{"per partition, linger", []kafka.ConsumeOption{kafka.WithBatch(50, 20*time.Millisecond)}},
		{"spanning partitions, commit each", []kafka.ConsumeOption{kafka.WithSpan(), kafka.WithBatch(120, 20*time.Millisecond), kafka.WithCommitEach(), kafka.WithDrain(time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testenv.Kafka(t, 3)
			produceN(t, c, "in", 0, 300)
			s := newStore()
			var single atomic.Bool
			h := func(_ context.Context, b *kafka.Batch) error {
				ps := map[int32]bool{}
				for _, m := range b.Messages {
					ps[m.Partition] = true
				}
				if len(ps) > 1 && b.Partition() >= 0 {
					single.Store(true)
				}
				s.add(b)
				return nil
			}
			stop, _ := run(t, c, "g", "in", h, tc.opts...)
			waitFor(t, "300 records", func() bool { return s.count() == 300 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if single.Load() {
				t.Fatal("a batch of one partition held records of several")
			}
			for _, n := range s.batches {
				if n > 120 {
					t.Fatalf("a batch of %d records", n)
				}
			}
			produceN(t, c, "in", 300, 10)
			again := newStore()
			stop, _ = run(t, c, "g", "in", func(_ context.Context, b *kafka.Batch) error { again.add(b); return nil }, tc.opts...)
			waitFor(t, "the 10 new records", func() bool { return again.count() >= 10 })
			time.Sleep(300 * time.Millisecond)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if again.count() != 10 || s.dupes() != 0 {
				t.Fatalf("the rerun read %d records (want the 10 new ones), the first run %d twice", again.count(), s.dupes())
			}
		})
	}
}

type health struct {
	mu   sync.Mutex
	errs []error
}

func (h *health) Set(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
}

func (h *health) last() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) == 0 {
		return errors.New("never set")
	}
	return h.errs[len(h.errs)-1]
}

// A store that fails is retried with the same batch, reported through
// the health meanwhile, and nothing is skipped or committed before it
// holds the batch.
func TestConsumeRetriesAFailingStoreAndReportsIt(t *testing.T) {
	t.Parallel()
	c := testenv.Kafka(t, 2)
	produceN(t, c, "in", 0, 100)
	s := newStore()
	var down atomic.Bool
	down.Store(true)
	var failures atomic.Int32
	h := &health{}
	stop, _ := run(t, c, "g", "in", func(_ context.Context, b *kafka.Batch) error {
		if down.Load() {
			failures.Add(1)
			return errors.New("store down")
		}
		s.add(b)
		return nil
	}, kafka.WithBatch(30, 10*time.Millisecond), kafka.WithRetry(5*time.Millisecond, 20*time.Millisecond), kafka.WithHealth(h))
	waitFor(t, "a few failures", func() bool { return failures.Load() > 5 })
	if err := h.last(); err == nil || s.count() != 0 {
		t.Fatalf("health %v with the store down, %d applied", err, s.count())
	}
	down.Store(false)
	waitFor(t, "100 records", func() bool { return s.count() == 100 })
	waitFor(t, "health to recover", func() bool { return h.last() == nil })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// Stop ends Consume with the handler's error and commits nothing of the
// batch, as a crash would: the next run gets it again.
func TestConsumeStopCommitsNothing(t *testing.T) {
	t.Parallel()
	c := testenv.Kafka(t, 1)
	produceN(t, c, "in", 0, 20)
	crash := errors.New("crash")
	_, done := run(t, c, "g", "in", func(context.Context, *kafka.Batch) error { return kafka.Stop(crash) }, kafka.WithBatch(100, 50*time.Millisecond), kafka.WithCommitEach())
	select {
	case err := <-done:
		if !errors.Is(err, crash) {
			t.Fatalf("Consume returned %v, want the crash", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Consume did not stop")
	}
	s := newStore()
	stop, _ := run(t, c, "g", "in", func(_ context.Context, b *kafka.Batch) error { s.add(b); return nil }, kafka.WithBatch(100, 50*time.Millisecond))
	waitFor(t, "the 20 records again", func() bool { return s.count() == 20 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A dead letter carries the original record, the reason, the consumer
// and where the record was read.
func TestConsumeDeadLettersWithTheReason(t *testing.T) {
	t.Parallel()
	c := testenv.Kafka(t, 1)
	produceN(t, c, "in", 0, 5)
	s := newStore()
	stop, _ := run(t, c, "g", "in", func(ctx context.Context, b *kafka.Batch) error {
		for _, m := range b.Messages {
			if string(m.Value) == "3" {
				if err := b.DeadLetter(ctx, m, "sink", kafka.ReasonInvalid, errors.New("three is bad")); err != nil {
					return err
				}
			}
		}
		s.add(b)
		return nil
	}, kafka.WithDeadLetter("in.dead"))
	waitFor(t, "5 records", func() bool { return s.count() == 5 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dls, err := kafka.ReadDeadLetters(context.Background(), c, "in.dead")
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %v, %v", dls, err)
	}
	d := dls[0]
	if string(d.Body) != "3" || d.Reason != kafka.ReasonInvalid || d.Projection != "sink" || d.Error != "three is bad" ||
		d.Topic != c.Topic("in") || d.Offset != 3 {
		t.Fatalf("dead letter %+v", d)
	}
}

// A handler holds a record until the one it waits for arrives: the
// commit stops before the held record and the handler is called again
// without news.
func TestConsumeHoldsUntilTheHandlerLetsGo(t *testing.T) {
	t.Parallel()
	c := testenv.Kafka(t, 1)
	produceN(t, c, "in", 0, 3)
	var mu sync.Mutex
	var applied []string
	var calls atomic.Int32
	release := make(chan struct{})
	stop, _ := run(t, c, "g", "in", func(_ context.Context, b *kafka.Batch) error {
		calls.Add(1)
		waiting, _ := b.Held().([]string)
		for _, m := range b.Messages {
			waiting = append(waiting, string(m.Value))
		}
		select {
		case <-release:
		default:
			b.Hold(waiting, 0, false)
			return nil
		}
		mu.Lock()
		applied = append(applied, waiting...)
		mu.Unlock()
		return nil
	}, kafka.WithRetry(5*time.Millisecond, 10*time.Millisecond))
	waitFor(t, "retries without news", func() bool { return calls.Load() > 5 })
	close(release)
	waitFor(t, "the held records", func() bool { mu.Lock(); defer mu.Unlock(); return len(applied) == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(applied, []string{"0", "1", "2"}) {
		t.Fatalf("applied %v", applied)
	}
}

// With a replica id every member is static: a member that stops and comes
// back (a rolling restart, a crash) takes its partitions back without the
// other members' sessions ending, so they apply on without a pause.
func TestConsumeStaticMemberRestartsWithoutRebalance(t *testing.T) {
	t.Parallel()
	c := testenv.Kafka(t, 4)
	produceN(t, c, "in", 0, 40)
	type member struct {
		s        *store
		sessions sync.Map // Batch.Session values seen
	}
	handler := func(m *member) kafka.Handler {
		return func(_ context.Context, b *kafka.Batch) error {
			m.sessions.Store(b.Session, true)
			m.s.add(b)
			return nil
		}
	}
	a, b := &member{s: newStore()}, &member{s: newStore()}
	ca, cb := c, c
	ca.Replica, cb.Replica = "a", "b"
	stopA, _ := run(t, ca, "g", "in", handler(a))
	stopB, _ := run(t, cb, "g", "in", handler(b))
	// Both hold partitions once each applies records produced after both
	// joined.
	for i := 1; a.s.count() == 0 || b.s.count() == 0 || a.s.count()+b.s.count() < 40*i; i++ {
		produceN(t, c, "in", 40*i, 40)
		waitFor(t, "the records", func() bool { return a.s.count()+b.s.count() >= 40*(i+1) })
		if i > 50 {
			t.Fatal("the two members never both held partitions")
		}
	}
	var before []uint64
	b.sessions.Range(func(k, _ any) bool { before = append(before, k.(uint64)); return true })
	last := slices.Max(before)

	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	a2 := &member{s: newStore()}
	run(t, ca, "g", "in", handler(a2))
	// Once a2 applies records the group has settled (a dynamic group has
	// rebalanced b by then too); b then applies its share of more.
	produceUntil(t, c, 100_000, "the restarted member's records", func() bool { return a2.s.count() > 0 })
	ofB := b.s.count()
	produceUntil(t, c, 200_000, "b's share of the records after the restart", func() bool { return b.s.count() > ofB })
	b.sessions.Range(func(k, _ any) bool {
		if s := k.(uint64); s > last {
			t.Errorf("member b started session %d (was %d): the restart of a rebalanced the group", s, last)
		}
		return true
	})
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
}

// produceUntil sends 40 records at a time to "in" until cond holds.
func produceUntil(t *testing.T, c kafka.Config, from int, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 50 {
			t.Fatalf("no %s", what)
		}
		produceN(t, c, "in", from+40*i, 40)
		time.Sleep(100 * time.Millisecond)
	}
}

// Two processes with one replica id fence each other: the consumer says
// so in its readiness instead of a bare Kafka error.
func TestConsumeSameReplicaIDIsReported(t *testing.T) {
	t.Parallel()
	c := testenv.Kafka(t, 2)
	c.Replica = "same"
	produceN(t, c, "in", 0, 10)
	h1, h2 := &health{}, &health{}
	nop := func(context.Context, *kafka.Batch) error { return nil }
	run(t, c, "g", "in", nop, kafka.WithHealth(h1), kafka.WithRetry(10*time.Millisecond, 100*time.Millisecond))
	run(t, c, "g", "in", nop, kafka.WithHealth(h2), kafka.WithRetry(10*time.Millisecond, 100*time.Millisecond))
	waitFor(t, "a fenced member to say why", func() bool {
		for _, h := range []*health{h1, h2} {
			h.mu.Lock()
			for _, err := range h.errs {
				if err != nil && strings.Contains(err.Error(), "REPLICA__ID must differ") && process.ReasonOf(err) == process.Fenced {
					h.mu.Unlock()
					return true
				}
			}
			h.mu.Unlock()
		}
		return false
	})
}

// WithCatchUp: a lingering batch goes to the handler as soon as the
// member has read every partition to its end, long before its linger, but
// never sooner than the gap after the previous batch, however the records
// trickle in (a bound on the store's writes per second).
func TestConsumeCatchUpClosesBatchesEarlyButAtMostOncePerGap(t *testing.T) {
	t.Parallel()
	const gap = 150 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts []kafka.ConsumeOption
	}{
		{"spanning partitions", []kafka.ConsumeOption{kafka.WithSpan(), kafka.WithCommitEach()}},
		{"per partition", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testenv.Kafka(t, 3)
			produceN(t, c, "in", 0, 30)
			s := newStore()
			var mu sync.Mutex
			calls := map[int32][]time.Time{}
			h := func(_ context.Context, b *kafka.Batch) error {
				mu.Lock()
				calls[b.Partition()] = append(calls[b.Partition()], time.Now())
				mu.Unlock()
				s.add(b)
				return nil
			}
			// Without the catch-up, nothing would arrive before the minute's linger.
			start := time.Now()
			stop, _ := run(t, c, "g", "in", h, append(tc.opts, kafka.WithBatch(1000, time.Minute), kafka.WithCatchUp(gap))...)
			waitFor(t, "the first 30 records", func() bool { return s.count() == 30 })
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("30 records applied after %v: the batch waited for its linger", d)
			}
			// A trickle: a record every 10 ms for about a second.
			for i := range 80 {
				produceN(t, c, "in", 30+i, 1)
				time.Sleep(10 * time.Millisecond)
			}
			waitFor(t, "the trickle", func() bool { return s.count() == 110 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for p, at := range calls {
				for i := 1; i < len(at); i++ {
					// The gap runs from the previous batch's start; the
					// handler is called a moment after it.
					if d := at[i].Sub(at[i-1]); d < gap-20*time.Millisecond {
						t.Fatalf("partition %d: two batches %v apart, gap %v", p, d, gap)
					}
				}
				if len(at) < 2 {
					t.Fatalf("partition %d: %d batches for a second's trickle: the catch-up did not close them", p, len(at))
				}
			}
			if s.dupes() != 0 {
				t.Fatalf("%d records applied twice", s.dupes())
			}
		})
	}
}
