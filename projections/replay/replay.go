// Package replay rebuilds a projection's tables from its logs beside the
// live ones and swaps them in once caught up, so queries keep answering
// during a rebuild. One engine (Rebuild) drives two targets:
//
//   - Postgres (NewPostgres): a projection of the event store, applied
//     into shadow copies of its tables in a schema of their own, then
//     moved into public in one transaction (postgres.go);
//   - ClickHouse (NewClickHouse): the request-log tables, rebuilt from
//     their topic under a suffix, then renamed in under a fence that holds
//     the live sink back (clickhouse.go, fence.go).
//
// The engine holds the "another replay of it is running" lock, builds the
// shadow, swaps it in, and drops it when anything stops the run before
// the swap. The Registry lists what serve runs and replay rebuilds.
package replay

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Target is what a replay rebuilds: a set of live tables, the logs they
// are built from and how a rebuilt copy takes their place.
type Target interface {
	// Name is what it rebuilds (`cfgd replay NAME`); one replay of a name
	// runs at a time.
	Name() string
	// Shadow builds the rebuilt tables beside the live ones from the
	// logs, close to where the live ones are, reporting progress.
	Shadow(ctx context.Context, progress Progress) error
	// Swap catches the shadow up with what arrived meanwhile and puts it
	// in the live tables' place: readers see the old tables, then the
	// new ones, never a mix.
	Swap(ctx context.Context) error
	// Drop removes whatever Shadow built, leaving the live tables as they
	// were; it runs after a failed or cancelled run, with a context that
	// is not cancelled, and must cope with a shadow half built.
	Drop(ctx context.Context) error
	// Result is what the run did so far.
	Result() Result
}

// Progress is called as a replay reads its log: done units (events or
// Kafka records, see Replayable.Unit) out of total (those the log held
// when the replay started plus what arrived since).
type Progress func(done, total int64)

// Result is what a replay did.
type Result struct {
	Events  int64 // events read (ClickHouse: rows inserted, one per event)
	Applied int64 // events a handler ran for (Postgres)
	// Records are the Kafka records read: a Postgres projection's feeds',
	// or the ClickHouse tables' topic.
	Records  int64
	Poisoned int64 // records skipped as unreadable (the live sink dead-lettered them)
	// Lost are the live rows the rebuild lacks because Kafka's retention
	// deleted their records (ClickHouse, with AllowPartial).
	Lost    int64
	Swapped bool
	// Resumed: before its own rebuild the replay finished a swap an
	// interrupted one had begun (ClickHouse on a cluster).
	Resumed bool
	Elapsed time.Duration
	// Load is the time a ClickHouse build took to read the topic into the
	// shadow raw table, Rollups the time filling its rollups took.
	Load, Rollups time.Duration
}

// ErrBusy refuses a second replay of a name already being replayed.
var ErrBusy = errors.New("another replay of it is running; wait for that one to finish or stop it")

// busyClass is the first key of replay's advisory locks ("rply"); the
// second is the FNV-32a of the name.
const busyClass = 0x72706c79

// Rebuild runs t: it takes t's busy lock in pool, builds the shadow and
// swaps it in. Cancelling ctx before the swap leaves the live tables
// untouched and drops the shadow; running it again starts over.
func Rebuild(ctx context.Context, pool *pgxpool.Pool, t Target, progress Progress) (Result, error) {
	if progress == nil {
		progress = func(int64, int64) {}
	}
	start := time.Now()
	res, err := rebuild(ctx, pool, t, progress)
	res.Elapsed = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("replay %s: %w", t.Name(), err)
	}
	return res, nil
}

func rebuild(ctx context.Context, pool *pgxpool.Pool, t Target, progress Progress) (Result, error) {
	unlock, err := lockBusy(ctx, pool, t.Name())
	if err != nil {
		return t.Result(), err
	}
	defer unlock()
	swapped := false
	defer func() {
		if swapped {
			return
		}
		// A failure here is harmless: the next run drops leftovers first.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = t.Drop(cctx)
	}()
	if err := t.Shadow(ctx, progress); err != nil {
		return t.Result(), err
	}
	if err := t.Swap(ctx); err != nil {
		return t.Result(), err
	}
	swapped = true
	res := t.Result()
	res.Swapped = true
	return res, nil
}

// lockBusy takes the session-level advisory lock of name on a connection
// of its own (a cancelled query closes a connection, and the lock must
// outlive the target's), and returns what releases it.
func lockBusy(ctx context.Context, pool *pgxpool.Pool, name string) (func(), error) {
	h := fnv.New32a()
	h.Write([]byte(name))
	key := int32(h.Sum32())
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	var locked bool
	// A replay stopped a moment ago (its process killed) may hold the lock
	// until its backend has exited: ask a few times.
	for try := 0; !locked && try < 5; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				conn.Release()
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, int32(busyClass), key).Scan(&locked); err != nil {
			conn.Release()
			return nil, fmt.Errorf("lock: %w", err)
		}
	}
	if !locked {
		conn.Release()
		return nil, ErrBusy
	}
	return func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(cctx, `SELECT pg_advisory_unlock($1, $2)`, int32(busyClass), key); err != nil {
			// Never hand a connection holding the lock back to the pool.
			_ = conn.Hijack().Close(cctx)
			return
		}
		conn.Release()
	}, nil
}
