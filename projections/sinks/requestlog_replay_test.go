package sinks

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// replayEnv is env plus the Postgres database the fence lives in.
type replayEnv struct {
	*rlEnv
	pool *pgxpool.Pool
	seq  atomic.Int64 // events produced so far (request ids)
}

func newReplayEnv(t *testing.T, partitions int) *replayEnv {
	t.Helper()
	return &replayEnv{rlEnv: newRLEnv(t, partitions), pool: testenv.Postgres(t)}
}

// spread produces n events, the i-th at from + i*step
// (testenv.RequestLogSpread).
func (e *replayEnv) spread(n int, from time.Time, step time.Duration) {
	e.t.Helper()
	evs := testenv.RequestLogSpread(&e.seq, n, from, step)
	for i := 0; i < n; i += 200 {
		if err := e.prod.Produce(context.Background(), evs[i:min(i+200, n)]); err != nil {
			e.t.Fatal(err)
		}
	}
}

// fencedSink starts the live sink behind fence (the Postgres one when nil).
func (e *replayEnv) fencedSink(fence RequestLogFence) *RequestLogs {
	e.t.Helper()
	return e.fencedSinkIn("live", fence)
}

// fencedSinkIn is fencedSink in consumer group group.
func (e *replayEnv) fencedSinkIn(group string, fence RequestLogFence) *RequestLogs {
	e.t.Helper()
	if fence == nil {
		fence = PostgresFence{Pool: e.pool}
	}
	cfg := DefaultRequestLogConfig(e.bus)
	cfg.Group = group
	cfg.BatchRows = 300
	cfg.BatchWait = 50 * time.Millisecond
	cfg.MaxBackoff = 200 * time.Millisecond
	s, err := NewFencedRequestLogs(cfg, e.conn, fence, testenv.Quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return s
}

func (e *replayEnv) replay(ctx context.Context) (replay.Result, error) {
	cfg := replay.DefaultClickHouseConfig(e.bus)
	cfg.BatchRows = 1000
	t, err := replay.NewClickHouse(cfg, e.conn, e.pool, RequestLogCodec{})
	if err != nil {
		return replay.Result{}, err
	}
	return replay.Rebuild(ctx, e.pool, t, nil)
}

// gate holds the sink back before it reaches the fence, so a test can make
// a swap happen between two of its batches.
type gate struct {
	RequestLogFence
	mu sync.RWMutex
}

func (g *gate) Shared(ctx context.Context, fn func(int64) error) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.RequestLogFence.Shared(ctx, fn)
}

func (g *gate) Own(ctx context.Context, topic string, parts []int32, writer string, fn func(int64, []int32, map[int32]int64) error) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.RequestLogFence.Own(ctx, topic, parts, writer, fn)
}

func TestSinkReloadsHeldOffsetsAfterASwap(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, 2)
	g := &gate{RequestLogFence: PostgresFence{Pool: e.pool}}
	s := e.fencedSink(g)
	e.spread(1000, time.Now().Add(-time.Hour), time.Millisecond)
	testenv.ExactRequestLogs(t, e.conn, 1000)
	// The sink has cached the offsets it holds. It reads 600 more events
	// but waits at the gate while a replay swaps in tables that already
	// hold them.
	g.mu.Lock()
	e.spread(600, time.Now(), time.Millisecond)
	res, err := e.replay(context.Background())
	if err != nil {
		g.mu.Unlock()
		t.Fatal(err)
	}
	if res.Events != 1600 {
		g.mu.Unlock()
		t.Fatalf("replay inserted %d events, want 1600", res.Events)
	}
	g.mu.Unlock()
	waitFor(t, "the sink to pass its batch", func() bool { st := s.Stats(); return st.Inserted+st.Skipped >= 1600 })
	testenv.ExactRequestLogs(t, e.conn, 1600)
	if st := s.Stats(); st.Inserted != 1000 || st.Skipped != 600 {
		t.Fatalf("sink inserted %d and skipped %d, want 1000 and 600", st.Inserted, st.Skipped)
	}
}

// A replay that died between its RENAME and the new views leaves a raw
// table whose inserts would not reach the rollups: the sink writes nothing
// then, says in its readiness what to run, and goes on once a replay
// finished the job.
func TestSinkWaitsForViewsAfterAReplayDiedInItsSwap(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, 2)
	ctx := context.Background()
	s := e.fencedSink(nil)
	e.spread(500, time.Now(), time.Millisecond)
	testenv.ExactRequestLogs(t, e.conn, 500)
	// What a replay leaves when it dies between the RENAME and the new
	// views: the generation bumped, the live raw table without views.
	if _, err := e.pool.Exec(ctx, `UPDATE requestlog_generation SET generation = generation + 1`); err != nil {
		t.Fatal(err)
	}
	for _, v := range requestlogview.LiveTables().Views() {
		if err := e.conn.Exec(ctx, "DROP TABLE "+v); err != nil {
			t.Fatal(err)
		}
	}
	e.spread(300, time.Now(), time.Millisecond)
	waitFor(t, "the sink to report the missing views", func() bool {
		err := s.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "cfgd replay "+replay.RequestLogName) &&
			process.ReasonOf(err) == process.ViewsMissing && process.ViewsMissing.Command() == "cfgd replay "+replay.RequestLogName
	})
	if raw, _, _, _ := testenv.RequestLogCounts(t, e.conn); raw != 500 {
		t.Fatalf("the sink wrote into a raw table without views: %d rows", raw)
	}
	if _, err := e.replay(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.ExactRequestLogs(t, e.conn, 800)
	waitFor(t, "the sink to be ready again", func() bool { return s.Ready(ctx) == nil })
}
