package store

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CommitSignal ticks when a connection of one pool that appended events
// goes back to the pool, which is after its transaction committed (or
// rolled back: a spare tick is harmless). The relay in the same process
// wakes on it instead of on a NOTIFY sent from the appending transaction:
// NOTIFY takes a database-wide lock from pre-commit to the end of the
// commit, which serialises every appending transaction behind one WAL
// flush at a time (on the machines of docs/benchmarks.md, 4,567 single-row inserts/s
// with the trigger against 16,145 without).
type CommitSignal struct {
	c     chan struct{}
	dirty sync.Map // *pgx.Conn that ran an append since it was acquired
}

// WatchCommits installs the signal on cfg, before the pool is created, as
// its query tracer (chaining any tracer already set). The release hook is
// the tracer's TraceRelease, which pgxpool calls in line: an AfterRelease
// hook would instead hand every released connection back to the pool from
// a new goroutine.
func WatchCommits(cfg *pgxpool.Config) *CommitSignal {
	s := &CommitSignal{c: make(chan struct{}, 1)}
	cfg.ConnConfig.Tracer = &appendTracer{s: s, next: cfg.ConnConfig.Tracer}
	return s
}

// C receives a tick after appends committed; ticks that arrive while one is
// pending merge into it.
func (s *CommitSignal) C() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.c
}

// Tick signals by hand (a caller that appended on a connection outside the
// pool).
func (s *CommitSignal) Tick() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

type appendTracer struct { // a pgx.QueryTracer and pgxpool.ReleaseTracer
	s    *CommitSignal
	next pgx.QueryTracer
}

func (t *appendTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(data.SQL, "/* cfgd:append */") {
		t.s.dirty.Store(conn, struct{}{})
	}
	if t.next != nil {
		return t.next.TraceQueryStart(ctx, conn, data)
	}
	return ctx
}

func (t *appendTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if t.next != nil {
		t.next.TraceQueryEnd(ctx, conn, data)
	}
}

// TraceRelease runs when a connection goes back to the pool: after the
// commit of the transaction it held, or after its single statement.
func (t *appendTracer) TraceRelease(pool *pgxpool.Pool, data pgxpool.TraceReleaseData) {
	if _, ok := t.s.dirty.LoadAndDelete(data.Conn); ok {
		t.s.Tick()
	}
	if next, ok := t.next.(pgxpool.ReleaseTracer); ok {
		next.TraceRelease(pool, data)
	}
}
