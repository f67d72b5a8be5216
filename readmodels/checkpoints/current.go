package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/deploy/process"
)

// Current tells whether a projection has passed every event of its types
// that the event store held when the Current was first asked (the process's
// start: serve's /readyz asks at once). A read model that authentication
// trusts (revoked sessions, API keys) is not current after a restart until
// then: its events may wait in a partition whose owner is this very process
// (static group members) or in an outbox no relay ran for.
//
// Once current it stays current: later events are the projection's lag,
// which the documented bounds already count.
type Current struct {
	db         DB
	projection string
	pending    string // the query of the oldest event not passed
	poll       time.Duration

	mu   sync.Mutex
	head int64 // the event store's highest position when first asked; 0: not yet
	from int64 // every event of types at or below from is passed
	done atomic.Bool
}

// NewCurrent returns the gate of projection name, which handles types (the
// code's constants). The types are written into the query, not bound, so
// that Postgres uses a partial index of the events of these types (each
// read model's migrations create one) rather than scan the event store.
func NewCurrent(db DB, name string, types ...string) *Current {
	quoted := make([]string, len(types))
	for i, t := range types {
		quoted[i] = "'" + strings.ReplaceAll(t, "'", "''") + "'"
	}
	return &Current{db: db, projection: name, poll: 20 * time.Millisecond, pending: `
		SELECT min(e.position) FROM events e
		WHERE e.position > $1 AND e.position <= $2 AND e.type IN (` + strings.Join(quoted, ", ") + `)
		  AND NOT EXISTS (SELECT 1 FROM projection_checkpoints p
		                  WHERE p.projection = $3 AND p.stream_id = e.stream_id AND p.version >= e.stream_version)`}
}

// ErrBehind is Check's error while the projection has not passed an event
// stored before the start.
var ErrBehind = errors.New("has not applied every event stored before this process started")

// Check returns nil once the projection has passed every event of its
// types stored when Check or Wait was first called, or an error marked
// process.Starting for /readyz.
func (c *Current) Check(ctx context.Context) error {
	if c.done.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done.Load() {
		return nil
	}
	if c.head == 0 {
		if err := c.db.QueryRow(ctx, `SELECT coalesce(max(position), 0) FROM events`).Scan(&c.head); err != nil {
			return fmt.Errorf("%s: event store head: %w", c.projection, err)
		}
		if c.head == 0 {
			c.done.Store(true) // an empty store: nothing to wait for
			return nil
		}
	}
	// The oldest event the projection has not passed; each check starts
	// where the last one found it, so only the first scans the whole store.
	var pending *int64
	if err := c.db.QueryRow(ctx, c.pending, c.from, c.head, c.projection).Scan(&pending); err != nil {
		return fmt.Errorf("%s: pending events: %w", c.projection, err)
	}
	if pending == nil {
		c.done.Store(true)
		return nil
	}
	c.from = *pending - 1
	return process.NotReady(process.Starting, fmt.Errorf("%s %w (event %d of %d)", c.projection, ErrBehind, *pending, c.head))
}

// Wait blocks until Check passes, ctx ends or wait has passed. Not current
// by then, it returns Check's last error as errcode.Unavailable: the
// caller's request gets a 503 to retry, not an answer from a stale view.
func (c *Current) Wait(ctx context.Context, wait time.Duration) error {
	if c.done.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	bo := process.Backoff(c.poll, 10*c.poll)
	for {
		err := c.Check(ctx)
		if err == nil || !errors.Is(err, ErrBehind) {
			return err
		}
		if !process.Wait(ctx, bo) {
			return errcode.Wrap(errcode.Unavailable, errcode.MessageUnavailable, err)
		}
	}
}
