package sinks_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cfgd/cfgd/projections/projectors"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
)

// usageEnv is the API-key stack (keys projected live) with a broker, the
// usage recorder on it and the live usage consumer.
type usageEnv struct {
	*grpctest.Env
	bus   kafka.Config
	rec   *apikey.UsageRecorder
	admin []string
	email string
	keys  []int64
	want  map[int64]int64 // uses produced per key
	mu    sync.Mutex
}

func startUsage(t *testing.T) *usageEnv {
	t.Helper()
	e := grpctest.Start(t)
	email, pass := authtest.Email("admin"), "admin password 1"
	e.Superuser(t, email, pass)
	u := &usageEnv{Env: e, bus: testenv.Kafka(t, 3), want: map[int64]int64{}, email: email,
		admin: []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(email+":"+pass))}}
	for i, typ := range []string{apikey.TypeService, apikey.TypeCLI, apikey.TypeService, apikey.TypeWebhook} {
		k := e.NewKey(t, fmt.Sprintf("k%d", i), typ, email, nil)
		u.keys = append(u.keys, k.State.ID)
	}
	// One key is revoked after some use.
	if _, err := e.Revoke.Handle(context.Background(), apikeys.Revoke{ID: u.keys[3], RevokedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	e.WaitProjected(t, projectors.KeysName, apikey.Stream(u.keys[3]))
	rc := apikey.DefaultUsageRecorderConfig(u.bus)
	rc.Timeout = 10 * time.Second
	r, err := apikey.NewUsageRecorder(rc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	u.rec = r
	return u
}

func (u *usageEnv) config() sinks.UsageConfig {
	cfg := sinks.DefaultUsageConfig(u.bus)
	cfg.BatchRecords = 4
	cfg.BatchWait = 30 * time.Millisecond
	return cfg
}

// consume runs the live usage consumer until the test ends or stop.
func (u *usageEnv) consume(t *testing.T) (stop func()) {
	t.Helper()
	c, err := sinks.NewUsage(u.config(), u.Pool, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("usage consumer: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// produce records n uses spread over the keys, at distinct times so
// last_used_at depends on which were counted, flushed every 5 uses so they
// spread over many records. The recorder is shared: the lock keeps one
// round's flushes from sending another's uses before they are counted in
// want.
func (u *usageEnv) produce(t *testing.T, round, n int) {
	t.Helper()
	base := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC).Add(time.Duration(round) * time.Hour)
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := range n {
		key := u.keys[(i*7+round)%len(u.keys)]
		u.want[key]++
		u.rec.Record(key, base.Add(time.Duration(i)*time.Second))
		if i%5 == 4 || i == n-1 {
			if err := u.rec.Flush(context.Background()); err != nil {
				t.Error(err)
				return
			}
		}
	}
}

// waitCounts waits until the keys' counts are what was produced.
func (u *usageEnv) waitCounts(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := u.counts(t)
		u.mu.Lock()
		ok := len(got) == len(u.keys)
		for k, n := range u.want {
			ok = ok && got[k] == n
		}
		want := fmt.Sprint(u.want)
		u.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage counts %v, want %s", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (u *usageEnv) counts(t *testing.T) map[int64]int64 {
	t.Helper()
	rows, err := u.Pool.Query(context.Background(), `SELECT id, request_count FROM api_keys`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	return out
}

// snapshot renders every row of api_keys, the projection's checkpoints,
// the usage consumer's stored offsets, and what the API serves of them
// (each key's detail and the usage statistics).
func (u *usageEnv) snapshot(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(testenv.Dump(t, u.Pool,
		`SELECT * FROM api_keys ORDER BY id`,
		`SELECT * FROM projection_checkpoints WHERE projection = 'apikey.keys' ORDER BY stream_id`,
		`SELECT * FROM consumer_offsets ORDER BY 1, 2, 3`))
	for _, id := range u.keys {
		r := u.Do(t, http.MethodGet, fmt.Sprintf("/api/grpc/api-keys/%d/", id), nil, u.admin...)
		fmt.Fprintf(&b, "detail %d: %d %s\n", id, r.Status, r.Raw)
	}
	r := u.Do(t, http.MethodGet, "/api/grpc/api-keys/stats/", nil, u.admin...)
	fmt.Fprintf(&b, "stats: %d %s\n", r.Status, r.Raw)
	return b.String()
}

// keysWithUsage is the API-key projection as cfgd replay builds it;
// afterRebuild, when set, runs once the feed has read the topic, before
// the swap.
func (u *usageEnv) keysWithUsage(t *testing.T, afterRebuild func()) *projections.Projection {
	t.Helper()
	return u.keysWithHooks(t, nil, afterRebuild)
}

// keysWithHooks is keysWithUsage with beforeRebuild, run after the events
// and before the feed reads the topic, too.
func (u *usageEnv) keysWithHooks(t *testing.T, beforeRebuild, afterRebuild func()) *projections.Projection {
	t.Helper()
	f, err := sinks.NewUsageFeed(u.config(), testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	p := projectors.Keys()
	p.Feeds = append(p.Feeds, hooked{Feed: f, before: beforeRebuild, after: afterRebuild})
	return p
}

type hooked struct {
	projections.Feed
	before, after func()
}

func (h hooked) Rebuild(ctx context.Context, conn *pgx.Conn, caughtUp func(context.Context) error, progress func(read, total int64)) (int64, error) {
	if h.before != nil {
		h.before()
	}
	n, err := h.Feed.Rebuild(ctx, conn, caughtUp, progress)
	if err == nil && h.after != nil {
		h.after()
	}
	return n, err
}

func registry(t *testing.T) *events.Registry {
	t.Helper()
	reg, err := events.NewRegistry(append(identity.Events(), apikey.Events()...)...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// Replaying the API-key projection rebuilds the keys with their usage
// counts, row for row and as the API serves them, and leaves the live
// consumer's offsets where it had them.
func TestReplayRebuildsKeysWithUsage(t *testing.T) {
	t.Parallel()
	u := startUsage(t)
	u.consume(t)
	for round := range 3 {
		u.produce(t, round, 23)
	}
	u.waitCounts(t)
	before := u.snapshot(t)
	if !strings.Contains(before, `"request_count":`) || strings.Contains(before, "stats: 200 {\"total_requests\":0") {
		t.Fatalf("the live read model misses the usage:\n%s", before)
	}
	res, err := replay.Run(context.Background(), u.Pool, registry(t), u.keysWithUsage(t, nil), replay.Config{BatchSize: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records == 0 {
		t.Fatalf("the usage feed read nothing: %+v", res)
	}
	if after := u.snapshot(t); after != before {
		t.Fatalf("replay differs from the live build:\nlive:\n%s\nreplayed:\n%s", before, after)
	}
}

// Usage produced while the replay runs is counted exactly once after the
// swap, whether the live consumer applied it to the old table before the
// swap (while the events replayed, or after the feed read the topic: the
// swap catches up) or not at all (the consumer is down: the shadow's
// offsets replace the live ones, so it does not count them again).
func TestReplayCountsUsageDuringTheReplayOnce(t *testing.T) {
	t.Parallel()
	u := startUsage(t)
	stop := u.consume(t)
	u.produce(t, 0, 30)
	u.waitCounts(t)
	var during chan struct{}
	reg := registry(t)
	// A key created once the events are replayed, and used at once, has
	// its row when the feed counts its use.
	created := func() {
		k := u.NewKey(t, "late", apikey.TypeService, u.email, nil)
		u.mu.Lock()
		u.keys = append(u.keys, k.State.ID)
		u.mu.Unlock()
		u.produce(t, 9, 8)
		u.waitCounts(t)
	}
	// The live consumer applies what arrives after the feed read the
	// topic to the old table before the swap.
	applied := func() {
		u.produce(t, 10, 13)
		u.waitCounts(t)
	}
	_, err := replay.Run(context.Background(), u.Pool, reg, u.keysWithHooks(t, created, applied), replay.Config{BatchSize: 1}, func(done, total int64) {
		if during == nil {
			during = make(chan struct{})
			go func() {
				defer close(during)
				for round := 1; round <= 4; round++ {
					u.produce(t, round, 11)
					time.Sleep(30 * time.Millisecond)
				}
			}()
		}
		select {
		case <-during:
		case <-time.After(40 * time.Millisecond):
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	<-during
	u.produce(t, 7, 9)
	u.waitCounts(t)

	// With the consumer down, the replay counts what it did not.
	stop()
	u.produce(t, 20, 17)
	if _, err := replay.Run(context.Background(), u.Pool, reg, u.keysWithUsage(t, nil), replay.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	u.waitCounts(t)
	u.consume(t)
	u.produce(t, 21, 6)
	u.waitCounts(t)
	// Nothing is counted twice later either.
	time.Sleep(300 * time.Millisecond)
	u.waitCounts(t)
	live := u.snapshot(t)
	if _, err := replay.Run(context.Background(), u.Pool, reg, u.keysWithUsage(t, nil), replay.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	if again := u.snapshot(t); again != live {
		t.Fatalf("a quiet replay differs:\n%s\nvs\n%s", live, again)
	}
}
