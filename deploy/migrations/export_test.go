package migrations

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// UpTo applies the Postgres migrations up to version, for tests of a
// migration over data written by the schema before it.
func UpTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	dir, err := fs.Sub(postgresFS, "postgres")
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := newProvider(db, dir)
	if err != nil {
		return err
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}
