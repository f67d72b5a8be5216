package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/events/store"
)

type noted struct {
	N int `json:"n"`
}

func (noted) EventType() string { return "test.noted" }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func appendN(t *testing.T, db store.DB, stream string, from, n int) {
	t.Helper()
	var envs []events.Envelope
	for i := range n {
		e, err := events.New(stream, noted{N: from + i}, events.Metadata{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if _, err := store.Append(context.Background(), db, stream, events.AnyVersion, envs...); err != nil {
		t.Fatal(err)
	}
}

func newRelay(t testing.TB, pool *pgxpool.Pool, c kafka.Config, pub outbox.Publisher, batch int) *outbox.Relay {
	t.Helper()
	if pub == nil {
		p, err := kafka.NewPublisher(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		pub = p
	}
	r, err := outbox.New(outbox.Config{Topic: c.Topic(kafka.TopicEvents), BatchSize: batch, Signer: testenv.Signer(t)}, pool, pub, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func setup(t testing.TB, partitions int) (*pgxpool.Pool, kafka.Config) {
	t.Helper()
	pool := testenv.Postgres(t)
	c := testenv.Kafka(t, partitions)
	if err := kafka.EnsureTopics(context.Background(), c, testenv.Quiet(), kafka.TopicEvents); err != nil {
		t.Fatal(err)
	}
	return pool, c
}

// checkDelivered asserts every stored event reached Kafka at least once and
// that, per stream, the first deliveries come in version order.
func checkDelivered(t *testing.T, pool *pgxpool.Pool, c kafka.Config, want int) (duplicates int) {
	t.Helper()
	msgs := testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), want, 30*time.Second)
	seen := map[string]bool{}
	lastVersion := map[string]int64{}
	for _, m := range msgs {
		e, err := events.Unmarshal(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Key) != e.Stream {
			t.Fatalf("partition key %q, want stream %q", m.Key, e.Stream)
		}
		if seen[e.ID.String()] {
			duplicates++
			continue
		}
		seen[e.ID.String()] = true
		if e.Version != lastVersion[e.Stream]+1 {
			t.Fatalf("stream %s: version %d after %d", e.Stream, e.Version, lastVersion[e.Stream])
		}
		lastVersion[e.Stream] = e.Version
	}
	var stored int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(seen) != stored || stored != want {
		t.Fatalf("delivered %d distinct events, stored %d, want %d", len(seen), stored, want)
	}
	return duplicates
}

// A transaction that takes an earlier position but commits after a later
// one must still be published; a position-only cursor would skip it.
func TestOutOfOrderCommitsAreNotSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, c := setup(t, 3)
	r := newRelay(t, pool, c, nil, 100)

	early, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Rollback(ctx)
	appendN(t, early, "early", 0, 1) // takes the lower position, commits last

	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, late, "late", 0, 1)
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	n, err := r.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("published %d events while an older transaction was open; want 0", n)
	}
	if err := early.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err = stepUntil(t, r, 2); err != nil || n != 2 {
		t.Fatalf("after commit: published %d (%v), want 2", n, err)
	}
	if n, _ = r.Step(ctx); n != 0 {
		t.Fatalf("re-published %d events", n)
	}
	checkDelivered(t, pool, c, 2)
}

// Many writers committing concurrently while the relay runs: nothing lost,
// per-stream order kept.
func TestConcurrentWritersWhileRelaying(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, c := setup(t, 4)
	r := newRelay(t, pool, c, nil, 50)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	const writers, perWriter = 8, 25
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range perWriter {
				tx, err := pool.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				e, _ := events.New(fmt.Sprintf("w-%d", w), noted{N: i}, events.Metadata{}, time.Now())
				if _, err := store.Append(ctx, tx, e.Stream, int64(i), e); err != nil {
					_ = tx.Rollback(ctx)
					errs <- err
					return
				}
				if err := tx.Commit(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	checkDelivered(t, pool, c, writers*perWriter)
	cancel()
	<-done
}

// failingPublisher delivers the first `ok` messages, then fails, as a broker
// that dies mid-batch would.
type failingPublisher struct {
	inner outbox.Publisher
	ok    int64
	sent  atomic.Int64
}

func (p *failingPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if p.sent.Add(1) > p.ok {
			return fmt.Errorf("broker gone")
		}
		if err := p.inner.Publish(topic, m); err != nil {
			return err
		}
	}
	return nil
}

func TestPublishFailureMidBatchResends(t *testing.T) {
	t.Parallel()
	pool, c := setup(t, 2)
	appendN(t, pool, "a", 0, 30)
	appendN(t, pool, "b", 0, 30)
	real, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	broken := newRelay(t, pool, c, &failingPublisher{inner: real, ok: 17}, 40)
	if _, err := stepUntil(t, broken, 1); err == nil {
		t.Fatal("want a publish error")
	}
	healed := newRelay(t, pool, c, real, 40)
	if n, err := stepUntil(t, healed, 60); err != nil || n != 60 {
		t.Fatalf("published %d (%v), want 60", n, err)
	}
	if dups := checkDelivered(t, pool, c, 60); dups != 17 {
		t.Fatalf("want the 17 messages sent before the failure re-sent once, got %d duplicates", dups)
	}
}

// The relay process is killed with SIGKILL in the middle of a batch, after
// Kafka took part of it and before the checkpoint moved. A new relay must
// deliver everything; what the dead one sent may appear twice.
func TestKilledRelayLosesNothing(t *testing.T) {
	if os.Getenv("CFGD_RELAY_CHILD") == "1" {
		t.Skip("runs as the child of this test")
	}
	t.Parallel()
	ctx := context.Background()
	pool, c := setup(t, 3)
	const total = 300
	for s := range 3 {
		appendN(t, pool, fmt.Sprintf("stream-%d", s), 0, total/3)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayChild$", "-test.v")
	cmd.Env = append(os.Environ(),
		"CFGD_RELAY_CHILD=1",
		"CFGD_RELAY_CHILD_DB="+poolURL(pool),
		"CFGD_RELAY_CHILD_BROKER="+c.Brokers[0],
		"CFGD_RELAY_CHILD_TOPIC="+c.Topic(kafka.TopicEvents),
		"CFGD_RELAY_CHILD_SASL_MECHANISM="+c.SASL.Mechanism,
		"CFGD_RELAY_CHILD_SASL_USER="+c.SASL.User,
		"CFGD_RELAY_CHILD_SASL_PASSWORD="+c.SASL.Password,
	)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once part of the one big batch is in Kafka.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := len(testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), 40, 200*time.Millisecond))
		if got >= 40 {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("child relay published nothing: %s", out)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The child must have died of the kill, not of its own failure (which
	// would also leave the checkpoint alone, proving nothing).
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) {
		t.Fatalf("child relay: want killed, got %v: %s", err, out)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child relay ended with %v, not by SIGKILL: %s", exit, out)
	}
	var moved int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM relay_checkpoints`).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if moved != 0 {
		t.Fatalf("checkpoint moved although the batch never completed")
	}

	r := newRelay(t, pool, c, nil, total)
	if n, err := stepUntil(t, r, total); err != nil || n != total {
		t.Fatalf("published %d (%v), want %d", n, err, total)
	}
	if dups := checkDelivered(t, pool, c, total); dups == 0 {
		t.Fatalf("expected the killed batch's messages to be re-sent")
	}
}

// stepUntil steps r until it has published want events or failed. Steps can
// publish nothing for a moment while another test's transaction holds the
// cluster-wide snapshot xmin back, which is the point of the xmin guard.
func stepUntil(t testing.TB, r *outbox.Relay, want int) (int, error) {
	t.Helper()
	total := 0
	deadline := time.Now().Add(30 * time.Second)
	for total < want && time.Now().Before(deadline) {
		n, err := r.Step(context.Background())
		if err != nil {
			return total, err
		}
		total += n
		if n == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return total, nil
}

func poolURL(p *pgxpool.Pool) string { return p.Config().ConnString() }

// slowPublisher sends one message at a time with a pause, so the parent has
// time to kill the process mid-batch.
type slowPublisher struct{ inner outbox.Publisher }

func (p slowPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if err := p.inner.Publish(topic, m); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// TestRelayChild is the process TestKilledRelayLosesNothing kills.
func TestRelayChild(t *testing.T) {
	if os.Getenv("CFGD_RELAY_CHILD") != "1" {
		t.Skip("only runs as a child of TestKilledRelayLosesNothing")
	}
	pool, err := pgxpool.New(context.Background(), os.Getenv("CFGD_RELAY_CHILD_DB"))
	if err != nil {
		t.Fatal(err)
	}
	c := kafka.Config{Brokers: []string{os.Getenv("CFGD_RELAY_CHILD_BROKER")}, Partitions: 3, SASL: kafka.SASL{
		Mechanism: os.Getenv("CFGD_RELAY_CHILD_SASL_MECHANISM"),
		User:      os.Getenv("CFGD_RELAY_CHILD_SASL_USER"),
		Password:  os.Getenv("CFGD_RELAY_CHILD_SASL_PASSWORD"),
	}}
	pub, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := outbox.New(outbox.Config{Topic: os.Getenv("CFGD_RELAY_CHILD_TOPIC"), BatchSize: 10_000, Signer: testenv.Signer(t)}, pool, slowPublisher{pub}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	// A step publishes nothing while another test's transaction holds the
	// snapshot xmin back; keep stepping until the one big batch goes out.
	for {
		n, err := r.Step(context.Background())
		if err != nil {
			t.Fatalf("child relay: %v", err)
		}
		if n > 0 {
			t.Fatalf("child relay finished its batch of %d before it was killed", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runRelay runs r until the test ends.
func runRelay(t *testing.T, r *outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// The relay's poll is a minute in these tests, so an event that arrives
// within seconds was published because something woke the outbox.
const longIdle = time.Minute

func relayWith(t *testing.T, pool *pgxpool.Pool, c kafka.Config, wake <-chan struct{}) *outbox.Relay {
	t.Helper()
	p, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	r, err := outbox.New(outbox.Config{Topic: c.Topic(kafka.TopicEvents), Idle: longIdle, Wake: wake, Signer: testenv.Signer(t)}, pool, p, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitDelivered fails t unless want events reach the topic within 5s, far
// below longIdle.
func waitDelivered(t *testing.T, c kafka.Config, want int) {
	t.Helper()
	if got := testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), want, 5*time.Second); len(got) < want {
		t.Fatalf("%d of %d events reached Kafka within 5s", len(got), want)
	}
}

func watchedPool(t *testing.T, url string) (*pgxpool.Pool, *store.CommitSignal) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	sig := store.WatchCommits(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, sig
}

func TestCommitInThisProcessWakesTheRelay(t *testing.T) {
	t.Parallel()
	pool, sig := watchedPool(t, testenv.PostgresURL(t))
	c := testenv.Kafka(t, 2)
	if err := kafka.EnsureTopics(context.Background(), c, quiet(), kafka.TopicEvents); err != nil {
		t.Fatal(err)
	}
	appendN(t, pool, "s", 0, 1)
	runRelay(t, relayWith(t, pool, c, sig.C()))
	waitDelivered(t, c, 1) // the first step, at start
	appendN(t, pool, "s", 1, 1)
	waitDelivered(t, c, 2)
}

// A process whose relay waits on standby passes its commits on to the
// leader, which runs elsewhere, as a NOTIFY.
func TestStandbyRelayWakesTheLeader(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	leaderPool, _ := watchedPool(t, url)
	otherPool, otherCommits := watchedPool(t, url)
	c := testenv.Kafka(t, 2)
	if err := kafka.EnsureTopics(context.Background(), c, quiet(), kafka.TopicEvents); err != nil {
		t.Fatal(err)
	}
	appendN(t, leaderPool, "s", 0, 1)
	runRelay(t, relayWith(t, leaderPool, c, nil))
	waitDelivered(t, c, 1) // the leader is up
	runRelay(t, relayWith(t, otherPool, c, otherCommits.C()))
	appendN(t, otherPool, "s", 1, 1)
	waitDelivered(t, c, 2)
}

// Rows committed behind a transaction that is still open are picked up
// soon after it ends, though that transaction appended nothing that would
// wake the outbox.
func TestRowsHeldBackByAnOpenTransactionFollowSoon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, c := setup(t, 2)
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil { // takes an xid, holds xmin back
		t.Fatal(err)
	}
	appendN(t, pool, "s", 0, 1)
	runRelay(t, relayWith(t, pool, c, nil))
	time.Sleep(300 * time.Millisecond)
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, c, 1)
}
