package projections

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Feed is a second source of a read model's tables beside the event store:
// a log (a Kafka topic) that a consumer of its own folds into the same
// tables, exactly once through offsets stored with its writes or
// idempotently (API-key usage from the request log, task statistics from
// the lifecycle topic). The runner never runs a feed (its consumer does,
// live); replay runs a projection's feeds after its events, so the rebuilt
// tables hold both sources.
type Feed interface {
	// Name of the feed, for messages.
	Name() string
	// Topic is the log the feed reads (`cfgd replay --list` names it).
	Topic() string
	// Rebuild folds the log, from its oldest record to its end at the time
	// of the call, into the shadow tables through conn, whose search_path
	// puts the shadow schema first: unqualified names are the shadow
	// tables, and a bookkeeping table the feed creates lands there. Each
	// time it has taken the log's end offsets, and before it reads up to
	// them, it calls caughtUp, which applies the events committed by then:
	// a record that refers to an event's row (a key's use after its
	// creation) finds the row. It reports the records read so far out of
	// those to read (which grows when the feed rereads what arrived
	// meanwhile) to progress, and returns the records read.
	Rebuild(ctx context.Context, conn *pgx.Conn, caughtUp func(context.Context) error, progress func(read, total int64)) (int64, error)
	// Lock runs first in the swap transaction, before the live tables are
	// locked: it takes the locks the live consumer takes before it writes
	// the tables (its stored offsets), in the consumer's order, so the
	// swap and the consumer never deadlock.
	Lock(ctx context.Context, tx pgx.Tx) error
	// CatchUp runs in the swap transaction once the live tables are locked
	// and the live consumer is blocked: it folds into the shadow tables at
	// least what the live consumer applied, and replaces the consumer's
	// stored offsets with the shadow's (schema names the shadow schema).
	// It returns the records read.
	CatchUp(ctx context.Context, tx pgx.Tx, schema string) (int64, error)
}
