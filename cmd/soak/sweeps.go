package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cfgd/cfgd/cmd/internal/servestack"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// Neither sweep can find anything to remove in a run of minutes unless
// something expired is put in front of it: the request-log edge refuses
// events older than the retention (one day here), and an idempotency key
// lives requestlogview.IdempotencyTTL (24 h, a constant, as is its sweep's
// once a minute). So every seedEvery the soak writes rows that have
// expired, the way an earlier day would have left them, and checks that
// each sweep removes them in time:
//
//   - request-log rows dated three days back, straight into the raw table
//     (a day partition older than CLICKHOUSE__RETENTION_DAYS=1): the
//     sink's retention (REQUESTLOG__RETENTION_EVERY=1m) must drop them
//     within retentionEvery + sweepSlack;
//   - idempotency rows created 25 hours back: the store's sweep (at most
//     once a minute, on a keyed ingest call, which the load makes ten times
//     a second) must delete them within a minute + sweepSlack.
const (
	seedEvery  = 2 * time.Minute
	sweepSlack = 30 * time.Second
)

type seed struct {
	kind     string
	n        int
	at, gone time.Time
}

type sweeps struct {
	st *servestack.Stack
	mu sync.Mutex
	s  []*seed
}

func newSweeps(st *servestack.Stack) *sweeps { return &sweeps{st: st} }

func (w *sweeps) run(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ctx.Err() == nil; n++ {
			w.seed(ctx, n)
			sleep(ctx, seedEvery)
		}
	}()
	poll := make(chan struct{})
	go func() {
		defer close(poll)
		for ctx.Err() == nil {
			w.poll(ctx)
			sleep(ctx, time.Second)
		}
	}()
	return func() { <-done; <-poll }
}

func (w *sweeps) seed(ctx context.Context, n int) {
	const rows = 100
	old := time.Now().UTC().AddDate(0, 0, -3)
	err := w.st.CH.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.%s (id, created_at, request_id, service_name, method_name, status)
		SELECT number + %d, toDateTime(%d), concat('expired-%d-', toString(number)), 'soak-expired', 'Old', 'success' FROM system.numbers LIMIT %d`,
		w.st.CHDB, requestlogview.RawTable, uint64(n+1)<<32, old.Unix(), n, rows))
	if err == nil {
		w.add(&seed{kind: "retention", n: n, at: time.Now()})
	} else if ctx.Err() == nil {
		fmt.Println("soak: seeding expired request-log rows:", err)
	}
	_, err = w.st.PG.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (caller, key, body_hash, status, answer, created_at)
		SELECT 'soak-expired', 'expired-%d-' || g, '\x00', 202, '{}', now() - interval '25 hours' FROM generate_series(1, %d) g`,
		requestlogview.IdempotencyTable, n, rows))
	if err == nil {
		w.add(&seed{kind: "idempotency", n: n, at: time.Now()})
	} else if ctx.Err() == nil {
		fmt.Println("soak: seeding expired idempotency rows:", err)
	}
}

func (w *sweeps) add(s *seed) {
	w.mu.Lock()
	w.s = append(w.s, s)
	w.mu.Unlock()
}

func (w *sweeps) poll(ctx context.Context) {
	w.mu.Lock()
	var open []*seed
	for _, s := range w.s {
		if s.gone.IsZero() {
			open = append(open, s)
		}
	}
	w.mu.Unlock()
	for _, s := range open {
		var left uint64
		var err error
		switch s.kind {
		case "retention":
			err = w.st.CH.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.%s WHERE service_name = 'soak-expired' AND request_id LIKE 'expired-%d-%%'",
				w.st.CHDB, requestlogview.RawTable, s.n)).Scan(&left)
		case "idempotency":
			var l int64
			err = w.st.PG.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE caller = 'soak-expired' AND key LIKE 'expired-%d-%%'",
				requestlogview.IdempotencyTable, s.n)).Scan(&l)
			left = uint64(l)
		}
		if err == nil && left == 0 {
			w.mu.Lock()
			s.gone = time.Now()
			w.mu.Unlock()
		}
	}
}

// bound is how long a sweep may take to remove what was seeded.
func bound(kind string) time.Duration {
	if kind == "retention" {
		return retentionEvery + sweepSlack
	}
	return time.Minute + sweepSlack
}

// check fails each seed removed late, or not removed although its bound
// passed before the run ended.
func (w *sweeps) check() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	end := time.Now()
	for _, s := range w.s {
		b := bound(s.kind)
		switch {
		case s.gone.IsZero() && end.Sub(s.at) > b:
			out = append(out, fmt.Sprintf("%s: expired rows seeded at %s still there at the end (%v later; bound %v)", s.kind, s.at.Format(time.TimeOnly), end.Sub(s.at).Round(time.Second), b))
		case !s.gone.IsZero() && s.gone.Sub(s.at) > b:
			out = append(out, fmt.Sprintf("%s: expired rows seeded at %s removed after %v (bound %v)", s.kind, s.at.Format(time.TimeOnly), s.gone.Sub(s.at).Round(time.Second), b))
		}
	}
	for _, kind := range []string{"retention", "idempotency"} {
		if w.count(kind) == 0 {
			out = append(out, kind+": no sweep was observed (nothing seeded, or the run was too short)")
		}
	}
	return out
}

// count is how many seeds of kind were removed.
func (w *sweeps) count(kind string) int {
	n := 0
	for _, s := range w.s {
		if s.kind == kind && !s.gone.IsZero() {
			n++
		}
	}
	return n
}

// summary is one line per kind: seeds removed and the slowest removal.
func (w *sweeps) summary() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, kind := range []string{"retention", "idempotency"} {
		var n, removed int
		var slowest time.Duration
		for _, s := range w.s {
			if s.kind != kind {
				continue
			}
			n++
			if !s.gone.IsZero() {
				removed++
				slowest = max(slowest, s.gone.Sub(s.at))
			}
		}
		out = append(out, fmt.Sprintf("%s sweep: %d of %d expired seeds removed, slowest after %v (bound %v)", kind, removed, n, slowest.Round(time.Second), bound(kind)))
	}
	return out
}
