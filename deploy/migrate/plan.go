package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

// Step is one migration of a store and whether the database has it.
type Step struct {
	Version   int64
	File      string
	Applied   bool
	AppliedAt time.Time // zero when pending
	// Up is what applying it runs: the file's "-- +goose Up" section.
	Up string
}

// PostgresPlan is every migration of schemas with its state on pool's
// database, oldest first. It changes nothing: a database goose never
// touched has everything pending.
func PostgresPlan(ctx context.Context, pool *pgxpool.Pool, schemas ...Schema) ([]Step, error) {
	fsys, err := Merge(schemas...)
	if err != nil {
		return nil, err
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrate postgres: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := NewPostgresProvider(db, schemas...)
	if err != nil {
		return nil, err
	}
	return plan(ctx, p, fsys, exists)
}

// ClickHousePlan is PostgresPlan for the ClickHouse database dsn names:
// a database that does not exist yet has everything pending, and is not
// created. schemas are rendered for the server (schemas the caller made
// with the server's features).
func ClickHousePlan(ctx context.Context, dsn string, schemas ...Schema) ([]Step, error) {
	fsys, err := Merge(schemas...)
	if err != nil {
		return nil, err
	}
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("clickhouse dsn: %w", err)
	}
	name := opts.Auth.Database
	if name == "" {
		name = "default"
	}
	admin := *opts
	admin.Auth.Database = "default"
	// Asked through the default database, which always exists: a
	// connection to a missing one is refused.
	db := clickhouse.OpenDB(&admin)
	defer db.Close()
	var tables uint64
	err = db.QueryRowContext(ctx, `SELECT count() FROM system.tables WHERE database = ? AND name = ?`, name, ClickHouseVersionTable).Scan(&tables)
	if err != nil {
		return nil, fmt.Errorf("migrate clickhouse: %w", err)
	}
	if tables > 0 {
		db = clickhouse.OpenDB(opts)
		defer db.Close()
	}
	p, err := NewClickHouseProvider(db, schemas...)
	if err != nil {
		return nil, err
	}
	return plan(ctx, p, fsys, tables > 0)
}

// plan reads the state of p's migrations; without a version table
// (versioned false) they are all pending and nothing is asked of the
// database (goose's Status would create the table).
func plan(ctx context.Context, p *goose.Provider, fsys fs.FS, versioned bool) ([]Step, error) {
	var steps []Step
	if versioned {
		st, err := p.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("migration status: %w", err)
		}
		for _, s := range st {
			steps = append(steps, Step{Version: s.Source.Version, File: s.Source.Path, Applied: s.State == goose.StateApplied, AppliedAt: s.AppliedAt})
		}
	} else {
		for _, s := range p.ListSources() {
			steps = append(steps, Step{Version: s.Version, File: s.Path})
		}
	}
	for i := range steps {
		b, err := fs.ReadFile(fsys, steps[i].File)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", steps[i].File, err)
		}
		steps[i].Up = upSection(string(b))
	}
	return steps, nil
}

// upSection is the statements between "-- +goose Up" and "-- +goose Down"
// (or the end), without goose's own annotations.
func upSection(file string) string {
	_, up, found := strings.Cut(file, "-- +goose Up")
	if !found {
		return strings.TrimSpace(file)
	}
	up, _, _ = strings.Cut(up, "-- +goose Down")
	var keep []string
	for _, line := range strings.Split(up, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "-- +goose ") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}
