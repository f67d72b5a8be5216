package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// rebuildFeeds folds each of the projection's feeds into the shadow tables
// once the events are applied, so the tables hold both sources before the
// swap catches both up.
func (r *Postgres) rebuildFeeds(ctx context.Context) error {
	for _, f := range r.p.Feeds {
		report := func(read, total int64) {
			if r.cfg.FeedProgress != nil {
				r.cfg.FeedProgress(f.Name(), read, total)
			}
		}
		n, err := f.Rebuild(ctx, r.conn, r.drain, report)
		if err != nil {
			return fmt.Errorf("feed %s: %w", f.Name(), err)
		}
		r.res.Records += n
	}
	return nil
}

// drain applies the events committed so far to the shadow tables,
// waiting, as the main loop does, for committed events that a running
// transaction still hides from the relay order.
func (r *Postgres) drain(ctx context.Context) error {
	for {
		n, err := r.batch(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		var hidden bool
		if err := r.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM public.events WHERE (tx_id, position) > ($1::bigint::text::xid8, $2))`,
			r.cursor.txID, r.cursor.position).Scan(&hidden); err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		if !hidden {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lockFeeds takes, first in the swap, the locks each feed's live consumer
// takes before it writes the live tables.
func (r *Postgres) lockFeeds(ctx context.Context, tx pgx.Tx) error {
	for _, f := range r.p.Feeds {
		if err := f.Lock(ctx, tx); err != nil {
			return fmt.Errorf("feed %s: lock: %w", f.Name(), err)
		}
	}
	return nil
}

// catchUpFeeds brings each feed's shadow up to its live consumer inside
// the swap, the live tables locked.
func (r *Postgres) catchUpFeeds(ctx context.Context, tx pgx.Tx) error {
	for _, f := range r.p.Feeds {
		n, err := f.CatchUp(ctx, tx, r.schema)
		if err != nil {
			return fmt.Errorf("feed %s: catch up: %w", f.Name(), err)
		}
		r.res.Records += n
	}
	return nil
}
