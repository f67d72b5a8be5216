package identityview

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/readmodels/checkpoints"
)

// Revocations is the set of revoked sessions whose tokens may still be
// presented. It reloads from the session_revocations read model at most once per
// interval, lazily, on the request that finds it stale, so a revocation is
// honoured within interval plus the projection's lag without a query per
// request. Add records a revocation this process made itself at once.
//
// The set stays small: an API session matters only until the last access
// token issued before its revocation expires (revoked_at + access TTL; no
// new ones are issued after), a web session until its cookie expires.
//
// After a start the set is trusted only once current is: the read model
// then holds every revocation stored before the process started, which
// may have waited in a partition only this process consumes. Until then a
// check waits for it (at most wait) rather than answer from a stale set.
type Revocations struct {
	db        DB
	interval  time.Duration
	accessTTL time.Duration
	now       func() time.Time
	current   *checkpoints.Current
	wait      time.Duration
	swept     atomic.Int64 // unix nanoseconds of the last sweep

	mu     sync.Mutex // serialises reloads
	state  sync.RWMutex
	set    map[string]time.Time // session id -> forget after
	loaded time.Time
}

// RevocationsProjection is the projection that fills session_revocations
// (projections/projectors), from these event types.
const RevocationsProjection = "identity.revocations"

// RevocationTypes are the event types of RevocationsProjection.
func RevocationTypes() []string { return []string{identity.SessionRevoked{}.EventType()} }

// NewRevocations returns the set; a check waits at most wait for the set to
// be current after the start.
func NewRevocations(db DB, interval, accessTTL time.Duration, now func() time.Time, wait time.Duration) *Revocations {
	return &Revocations{db: db, interval: interval, accessTTL: accessTTL, now: now, wait: wait, set: map[string]time.Time{},
		current: checkpoints.NewCurrent(db, RevocationsProjection, RevocationTypes()...)}
}

// Ready fails until the set is current as of the start and loaded.
func (r *Revocations) Ready(ctx context.Context) error {
	if err := r.current.Check(ctx); err != nil {
		return err
	}
	return r.refresh(ctx)
}

// Revoked tells whether session id is revoked.
func (r *Revocations) Revoked(ctx context.Context, id string) (bool, error) {
	if err := r.current.Wait(ctx, r.wait); err != nil {
		return false, fmt.Errorf("revocation set: %w", err)
	}
	if err := r.refresh(ctx); err != nil {
		return false, err
	}
	r.state.RLock()
	defer r.state.RUnlock()
	_, ok := r.set[id]
	return ok, nil
}

// Add marks id revoked until forgetAfter.
func (r *Revocations) Add(id string, forgetAfter time.Time) {
	r.state.Lock()
	defer r.state.Unlock()
	r.set[id] = forgetAfter
}

func (r *Revocations) refresh(ctx context.Context) error {
	r.state.RLock()
	fresh := r.now().Sub(r.loaded) < r.interval
	r.state.RUnlock()
	if fresh {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state.RLock()
	fresh = r.now().Sub(r.loaded) < r.interval
	r.state.RUnlock()
	if fresh {
		return nil // another request reloaded while this one waited
	}
	now := r.now()
	r.sweep(ctx, now)
	rows, err := r.db.Query(ctx, liveRevocations, now, r.accessTTL)
	if err != nil {
		return fmt.Errorf("load revocations: %w", err)
	}
	defer rows.Close()
	next := map[string]time.Time{}
	for rows.Next() {
		var id string
		var until time.Time
		if err := rows.Scan(&id, &until); err != nil {
			return fmt.Errorf("load revocations: %w", err)
		}
		next[id] = until
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load revocations: %w", err)
	}
	r.state.Lock()
	defer r.state.Unlock()
	// Keep local additions the projection has not reached yet.
	for id, until := range r.set {
		if _, ok := next[id]; !ok && until.After(now) {
			next[id] = until
		}
	}
	r.set, r.loaded = next, now
	return nil
}

// liveRevocations are the revoked sessions whose tokens could still be
// presented at $1, an access token living $2.
const liveRevocations = `
	SELECT session_id::text, CASE WHEN kind = 'web' THEN expires_at ELSE least(expires_at, revoked_at + $2::interval) END
	FROM session_revocations
	WHERE (kind = 'web' AND expires_at > $1) OR (kind = 'api' AND revoked_at + $2::interval > $1)`

// SweepEvery is how often a process sweeps session_revocations at most.
const SweepEvery = time.Minute

// sweep deletes, at most once per SweepEvery per process, the revocations
// of sessions that have ended: every token of such a session has expired,
// so its row can never refuse one again. The revocations projection does
// not insert such rows either (InsertRevocation), so a replay holds what
// the live table holds after its sweep. A failed sweep only leaves rows for
// the next one.
func (r *Revocations) sweep(ctx context.Context, now time.Time) {
	last := r.swept.Load()
	if now.UnixNano()-last < int64(SweepEvery) || !r.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	_, _ = SweepRevocations(ctx, r.db)
}

// SweepBatch bounds the rows one sweep deletes: a sweep runs on the path
// of the request that reloads the set, so it stays one short statement
// (1,000 rows a minute a process outpaces any real rate of logouts).
const SweepBatch = 1000

// SweepRevocations deletes up to SweepBatch revocations whose session has
// ended, by the database's clock as InsertRevocation, and returns how many.
func SweepRevocations(ctx context.Context, db DB) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM session_revocations WHERE session_id IN (
		SELECT session_id FROM session_revocations WHERE expires_at <= now() ORDER BY expires_at LIMIT $1)`, SweepBatch)
	if err != nil {
		return 0, fmt.Errorf("sweep revocations: %w", err)
	}
	return tag.RowsAffected(), nil
}
