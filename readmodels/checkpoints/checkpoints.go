// Package checkpoints reads how far each projection has applied each
// stream (projection_checkpoints, written by the projection runner in the
// same transaction as the read model), so a reader can wait to read its
// own write.
package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/jackc/pgx/v5"
)

// DB is what Wait needs; *pgxpool.Pool and pgx.Tx satisfy it.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Wait blocks until projection name has passed stream's version (applied
// it, found nothing to do for it, or dead-lettered it), so a caller can
// read its own write. It polls the checkpoint, which is written in the
// same transaction as the read model.
func Wait(ctx context.Context, db DB, name, stream string, version int64) error {
	bo := process.Backoff(2*time.Millisecond, 50*time.Millisecond)
	for {
		var seen int64
		err := db.QueryRow(ctx, `SELECT version FROM projection_checkpoints WHERE projection = $1 AND stream_id = $2`, name, stream).Scan(&seen)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("wait for %s: %w", name, err)
		}
		if seen >= version {
			return nil
		}
		if !process.Wait(ctx, bo) {
			return fmt.Errorf("wait for %s to reach %s v%d: %w", name, stream, version, ctx.Err())
		}
	}
}
