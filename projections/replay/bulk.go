package replay

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events"
)

// bulk applies what the log holds when it starts, batch by batch, each in
// a transaction of its own like batch, but reads the next batch on another
// connection of the pool while one is applied: reading and decoding a
// batch cost about as much as applying it. It returns once a read finds
// nothing more; the caller's loop then reads in its batches' transactions
// again, up to the swap.
func (r *Postgres) bulk(ctx context.Context) error {
	type read struct {
		batch []events.Envelope
		next  cursor
		err   error
	}
	ctx, cancel := context.WithCancel(ctx)
	reads := make(chan read, 1)
	defer func() {
		// The reader stops at its next read or send; wait for it, so
		// that it no longer holds a connection of the pool.
		cancel()
		for range reads {
		}
	}()
	go func() {
		defer close(reads)
		cur := r.cursor
		for {
			batch, next, err := r.read(ctx, r.pool, cur)
			if err == nil && len(batch) == 0 {
				return
			}
			select {
			case reads <- read{batch, next, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
			cur = next
		}
	}()
	for rd := range reads {
		if rd.err != nil {
			return rd.err
		}
		err := pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error { return r.apply(ctx, tx, rd.batch, rd.next) })
		if err != nil {
			return err
		}
		r.progress(r.res.Events, r.total)
	}
	return ctx.Err()
}
