// Package migrations holds cfgd's Postgres schema as versioned SQL files and
// applies them with goose. `cfgd migrate` and `cfgd serve` both call Up.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed postgres/*.sql
var postgresFS embed.FS

// Up applies every pending Postgres migration. A session-level advisory lock
// (goose's Postgres locker) keeps two starting processes from racing.
func Up(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	dir, err := fs.Sub(postgresFS, "postgres")
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := newProvider(db, dir)
	if err != nil {
		return err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	for _, r := range results {
		log.InfoContext(ctx, "migration applied", "version", r.Source.Version, "file", r.Source.Path, "took", r.Duration)
	}
	return nil
}

func newProvider(db *sql.DB, dir fs.FS) (*goose.Provider, error) {
	locker, err := newLocker()
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, dir, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

func newLocker() (lock.SessionLocker, error) {
	l, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return l, nil
}

// Fingerprint is a short hash of every Postgres migration file. Test helpers
// name their migrated template database after it, so one template serves
// every test run until a migration changes.
func Fingerprint() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(postgresFS, "postgres", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := postgresFS.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("migrations fingerprint: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}
