package identityview

import (
	"context"
	"fmt"
	"sync"
	"time"
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
type Revocations struct {
	db        DB
	interval  time.Duration
	accessTTL time.Duration
	now       func() time.Time

	mu     sync.Mutex // serialises reloads
	state  sync.RWMutex
	set    map[string]time.Time // session id -> forget after
	loaded time.Time
}

// NewRevocations returns the set.
func NewRevocations(db DB, interval, accessTTL time.Duration, now func() time.Time) *Revocations {
	return &Revocations{db: db, interval: interval, accessTTL: accessTTL, now: now, set: map[string]time.Time{}}
}

// Revoked tells whether session id is revoked.
func (r *Revocations) Revoked(ctx context.Context, id string) (bool, error) {
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
	rows, err := r.db.Query(ctx, `
		SELECT session_id::text, CASE WHEN kind = 'web' THEN expires_at ELSE least(expires_at, revoked_at + $2::interval) END
		FROM session_revocations
		WHERE (kind = 'web' AND expires_at > $1) OR (kind = 'api' AND revoked_at + $2::interval > $1)`,
		now, r.accessTTL)
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
