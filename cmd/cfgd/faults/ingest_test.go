package faults

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/cmd/internal/rig"
)

// ingester posts request-log batches over HTTP with an API key and keeps
// what it sent and what cfgd acknowledged (202).
type ingester struct {
	c     *cfgd
	key   string
	keyID int64
	batch int
	pause time.Duration

	mu       sync.Mutex
	sent     map[string]bool
	acked    map[string]bool
	calls    int // 202 answers
	attempts int // posts made, answered or not
}

func newIngester(c *cfgd, key string, keyID int64, batch int, pause time.Duration) *ingester {
	return &ingester{c: c, key: key, keyID: keyID, batch: batch, pause: pause, sent: map[string]bool{}, acked: map[string]bool{}}
}

// run starts workers goroutines posting until ctx ends; wait for them
// with the returned function.
func (in *ingester) run(ctx context.Context, name string, workers int) (wait func()) {
	return load(ctx, workers, in.pause, func(ctx context.Context, w, seq int) bool {
		return in.post(ctx, fmt.Sprintf("%s-%d-%d", name, w, seq))
	})
}

// load runs do in workers goroutines, again and again with pause between
// calls, until ctx ends; wait for them with the returned function. A
// refused call (the faults under test) backs off a little, as a client
// would.
func load(ctx context.Context, workers int, pause time.Duration, do func(ctx context.Context, worker, seq int) bool) (wait func()) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				p := pause
				if !do(ctx, w, seq) {
					p = max(p, 50*time.Millisecond)
				}
				if p > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(p):
					}
				}
			}
		}()
	}
	return wg.Wait
}

// post sends one batch; errors and refusals are the faults under test,
// so they only mean "not acknowledged".
func (in *ingester) post(ctx context.Context, prefix string) bool {
	evs := make([]rig.LogEvent, in.batch)
	for i := range evs {
		evs[i] = rig.LogEvent{RequestID: fmt.Sprintf("%s-%d", prefix, i), ServiceName: "faults", MethodName: "Post",
			Status: "success", DurationMS: int64(i % 50), APIKeyID: in.keyID}
	}
	in.mu.Lock()
	for _, e := range evs {
		in.sent[e.RequestID] = true
	}
	in.attempts++
	in.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	code, err := in.c.post(pctx, "/api/grpc/monitor/ingest/", evs, map[string]string{"X-API-Key": in.key}, nil)
	if err != nil || code != http.StatusAccepted {
		if err == nil && code != http.StatusServiceUnavailable && code != http.StatusUnauthorized && code >= 400 && code < 500 {
			// A 4xx other than auth trouble is a bug of this test's batch.
			in.c.t.Errorf("ingest answered %d", code)
		}
		return false
	}
	in.mu.Lock()
	for _, e := range evs {
		in.acked[e.RequestID] = true
	}
	in.calls++
	in.mu.Unlock()
	return true
}

func (in *ingester) counts() (sent, acked, calls int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.sent), len(in.acked), in.calls
}

// waitAcked waits until at least n batches were acknowledged in all.
func (in *ingester) waitAcked(t testing.TB, n int, timeout time.Duration) time.Duration {
	t.Helper()
	return eventually(t, fmt.Sprintf("%d acknowledged batches", n), timeout, func() error {
		if _, _, calls := in.counts(); calls < n {
			return fmt.Errorf("%d acknowledged", calls)
		}
		return nil
	})
}

// merged is one ingester holding what ins sent and had acknowledged.
func merged(c *cfgd, ins []*ingester) *ingester {
	all := newIngester(c, ins[0].key, ins[0].keyID, 0, 0)
	for _, in := range ins {
		in.mu.Lock()
		maps.Copy(all.sent, in.sent)
		maps.Copy(all.acked, in.acked)
		all.calls += in.calls
		all.attempts += in.attempts
		in.mu.Unlock()
	}
	return all
}

// ingestEach starts one ingester per replica (batches of 50, every
// 20 ms) until ctx ends; wait waits for them.
func ingestEach(ctx context.Context, replicas []*cfgd, key string, keyID int64) (ins ingesters, wait []func()) {
	for i, r := range replicas {
		in := newIngester(r, key, keyID, 50, 20*time.Millisecond)
		ins = append(ins, in)
		wait = append(wait, in.run(ctx, fmt.Sprintf("r%d", i), 1))
	}
	return ins, wait
}

// ingesters are several replicas' ingesters, counted together.
type ingesters []*ingester

// acked is the batches all of them had acknowledged.
func (is ingesters) acked() int {
	n := 0
	for _, in := range is {
		_, _, calls := in.counts()
		n += calls
	}
	return n
}

// waitAcked waits until at least n batches were acknowledged in all.
func (is ingesters) waitAcked(t testing.TB, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d acknowledged batches", n), 60*time.Second, func() error {
		if got := is.acked(); got < n {
			return fmt.Errorf("%d acknowledged", got)
		}
		return nil
	})
}

func openClickHouse(t testing.TB, url string) driver.Conn {
	t.Helper()
	opts, err := clickhouse.ParseDSN(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func openPostgres(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// checkIngested waits (bounded) until ClickHouse holds every acknowledged
// event and the API key's usage count is at least minUsage, then checks
// that nothing is doubled and nothing appeared that was never sent. The
// usage counts the posts the key authenticated (never the events'
// api_key_id): at most every post made, at least minUsage (the posts
// acknowledged by a process that was not killed afterwards: a SIGKILL
// loses the uses it had not sent yet). It returns the rows held: the
// acknowledged events and those of posts cut off after they were stored.
func (in *ingester) checkIngested(t testing.TB, ch driver.Conn, pg *pgxpool.Pool, timeout time.Duration, minUsage int) int {
	t.Helper()
	in.mu.Lock()
	sent, acked, attempts := in.sent, in.acked, in.attempts
	in.mu.Unlock()
	var rows []string
	var usage int64
	prev := -1
	took := eventually(t, "ClickHouse and the key's usage catch up", timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rows = rows[:0]
		r, err := ch.Query(ctx, "SELECT request_id FROM requestlog_raw")
		if err != nil {
			return err
		}
		for r.Next() {
			var id string
			if err := r.Scan(&id); err != nil {
				r.Close()
				return err
			}
			rows = append(rows, id)
		}
		r.Close()
		if err := r.Err(); err != nil {
			return err
		}
		if err := pg.QueryRow(ctx, `SELECT request_count FROM api_keys WHERE id = $1`, in.keyID).Scan(&usage); err != nil {
			return err
		}
		held := make(map[string]bool, len(rows))
		for _, id := range rows {
			if held[id] {
				// A doubled row never goes away: no point waiting.
				t.Fatalf("request id %s is in ClickHouse more than once (%d rows so far)", id, len(rows))
			}
			held[id] = true
		}
		missing := 0
		for id := range acked {
			if !held[id] {
				missing++
			}
		}
		stable := len(rows) == prev
		prev = len(rows)
		switch {
		case missing > 0:
			return fmt.Errorf("%d of %d acknowledged events not in ClickHouse (%d rows)", missing, len(acked), len(rows))
		case usage < int64(minUsage):
			return fmt.Errorf("usage count %d, want at least %d", usage, minUsage)
		case !stable:
			return fmt.Errorf("still growing: %d rows", len(rows))
		}
		return nil
	})
	held := make(map[string]int, len(rows))
	for _, id := range rows {
		held[id]++
	}
	var doubled, unknown int
	for id, n := range held {
		if n > 1 {
			doubled++
		}
		if !sent[id] {
			unknown++
		}
	}
	if doubled > 0 {
		t.Errorf("%d request ids are in ClickHouse more than once (%d rows, %d distinct)", doubled, len(rows), len(held))
	}
	if unknown > 0 {
		t.Errorf("%d request ids in ClickHouse were never sent", unknown)
	}
	if usage < int64(minUsage) || usage > int64(attempts) {
		t.Errorf("API key usage count %d, want from %d to %d (one per post the key authenticated)", usage, minUsage, attempts)
	}
	t.Logf("sent %d, acknowledged %d, held %d (distinct %d), usage %d of %d posts; caught up in %v",
		len(sent), len(acked), len(rows), len(held), usage, attempts, took.Round(time.Millisecond))
	return len(rows)
}

// TestSIGKILLDuringIngestion kills serve while several clients post
// request-log batches, restarts it on the same broker data and checks
// that every acknowledged event is in ClickHouse exactly once, and that
// the key's usage counts every post the restarted process acknowledged.
func TestSIGKILLDuringIngestion(t *testing.T) {
	t.Parallel()
	_, redisURL := startRedis(t)
	chURL := localClickHouse(t)
	pgURL := testenv.PostgresURL(t)
	c := newCfgd(t, map[string]string{"POSTGRES__URL": pgURL, "CLICKHOUSE__URL": chURL, "REDIS__URL": redisURL})
	c.run("migrate")
	key, keyID := c.apiKey("ingest@example.com")
	c.start()
	c.waitReady(60 * time.Second)

	in := newIngester(c, key, keyID, 200, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := in.run(ctx, "a", 4)
	// Mid-load: well after the first batches reached ClickHouse, with more
	// in flight.
	in.waitAcked(t, 40, 60*time.Second)
	c.kill()
	time.Sleep(200 * time.Millisecond)
	c.start()
	c.waitReady(60 * time.Second)
	// The restarted serve takes load again before the load stops.
	_, _, before := in.counts()
	in.waitAcked(t, before+10, 60*time.Second)
	cancel()
	wait()
	_, _, calls := in.counts()
	in.checkIngested(t, openClickHouse(t, chURL), openPostgres(t, pgURL), 60*time.Second, calls-before)
}
