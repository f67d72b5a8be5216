package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/events"
)

// Outcome of applying one envelope.
type Outcome int

// Outcomes.
const (
	Applied   Outcome = iota // handler ran, checkpoint advanced
	Duplicate                // already applied: nothing changed
	Ignored                  // the projection has no handler for the type
)

// Apply runs p's handler for env in one transaction with the checkpoint.
// Events of one stream arrive in version order, so "version already seen"
// is exactly "duplicate".
func Apply(ctx context.Context, pool *pgxpool.Pool, reg *events.Registry, p *Projection, env events.Envelope) (Outcome, error) {
	h, ok := p.handlers[env.Type]
	if !ok {
		return Ignored, nil
	}
	ev, err := reg.Decode(env)
	if err != nil {
		return 0, err
	}
	outcome := Applied
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Claim the version first: the upsert both detects a duplicate and
		// locks the checkpoint row, so two consumers of one stream (during a
		// rebalance) cannot both apply the same event.
		tag, err := tx.Exec(ctx, `
			INSERT INTO projection_checkpoints (projection, stream_id, version) VALUES ($1, $2, $3)
			ON CONFLICT (projection, stream_id) DO UPDATE SET version = excluded.version
			WHERE projection_checkpoints.version < excluded.version`,
			p.Name, env.Stream, env.Version)
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if tag.RowsAffected() == 0 {
			outcome = Duplicate
			return nil
		}
		return h(ctx, tx, env, ev)
	})
	if err != nil {
		// A concurrent first insert of the same checkpoint row (two consumers
		// during a rebalance) is retried by the runner like any transient error.
		return 0, fmt.Errorf("projection %s: apply %s %s v%d: %w", p.Name, env.Type, env.Stream, env.Version, err)
	}
	return outcome, nil
}

// Wait blocks until projection name has applied stream up to version, so a
// caller can read its own write. It polls the checkpoint, which is written in
// the same transaction as the read model.
func Wait(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, name, stream string, version int64) error {
	delay := 2 * time.Millisecond
	for {
		var seen int64
		err := db.QueryRow(ctx, `SELECT version FROM projection_checkpoints WHERE projection = $1 AND stream_id = $2`, name, stream).Scan(&seen)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("wait for %s: %w", name, err)
		}
		if seen >= version {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to reach %s v%d: %w", name, stream, version, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}
