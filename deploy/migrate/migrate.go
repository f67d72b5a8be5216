// Package migrate applies cfgd's schema with goose. It owns no schema: each
// package that owns tables embeds its migrations and the wiring in cmd/cfgd
// hands them here as Schemas. Postgres keeps one goose version table over
// the union of the owners' files, so a database migrated before the files
// moved to their owners sees the same versions and nothing pending;
// ClickHouse has its own version table, kept by a store that works on 18.16.
package migrate

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// Schema is one owner's migrations: goose files (NNNNN_name.sql) at the
// root of FS.
type Schema struct {
	// Owner names the owning package in errors and in the ownership test.
	Owner string
	FS    fs.FS
}

// Postgres applies every pending migration of schemas to pool's database.
// Goose's Postgres session lock (an advisory lock) keeps two starting
// processes from racing.
func Postgres(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, schemas ...Schema) error {
	return postgresUp(ctx, pool, log, 0, schemas)
}

// PostgresTo is Postgres up to version and no further, for tests of a
// migration over data the schema before it wrote.
func PostgresTo(ctx context.Context, pool *pgxpool.Pool, version int64, schemas ...Schema) error {
	return postgresUp(ctx, pool, slog.New(slog.DiscardHandler), version, schemas)
}

func postgresUp(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, to int64, schemas []Schema) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := NewPostgresProvider(db, schemas...)
	if err != nil {
		return err
	}
	var results []*goose.MigrationResult
	if to > 0 {
		results, err = p.UpTo(ctx, to)
	} else {
		results, err = p.Up(ctx)
	}
	if err != nil {
		return fmt.Errorf("migrate postgres: %w", err)
	}
	logResults(ctx, log, "postgres", results)
	return nil
}

// NewPostgresProvider is the goose provider over the union of schemas, with
// goose's default version table (goose_db_version).
func NewPostgresProvider(db *sql.DB, schemas ...Schema) (*goose.Provider, error) {
	fsys, err := Merge(schemas...)
	if err != nil {
		return nil, err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrate postgres: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return nil, fmt.Errorf("migrate postgres: %w", err)
	}
	return p, nil
}

func logResults(ctx context.Context, log *slog.Logger, store string, results []*goose.MigrationResult) {
	for _, r := range results {
		log.InfoContext(ctx, "migration applied", "store", store, "version", r.Source.Version, "file", r.Source.Path, "took", r.Duration)
	}
}

// Merge is one file system holding the migrations of every schema. Two
// owners must not share a version: goose keeps one version table per
// database, so versions are numbered across owners.
func Merge(schemas ...Schema) (fs.FS, error) {
	if len(schemas) == 0 {
		return nil, errNoSchema
	}
	u := union{}
	byVersion := map[int64]string{}
	for _, s := range schemas {
		names, err := fs.Glob(s.FS, "*.sql")
		if err != nil {
			return nil, fmt.Errorf("migrate: %s: %w", s.Owner, err)
		}
		for _, name := range names {
			v, err := goose.NumericComponent(name)
			if err != nil {
				return nil, fmt.Errorf("migrate: %s: %s is not named NNNNN_name.sql: %w", s.Owner, name, err)
			}
			if other, ok := byVersion[v]; ok {
				return nil, fmt.Errorf("migrate: version %d is taken twice: %s and %s/%s", v, other, s.Owner, name)
			}
			byVersion[v] = s.Owner + "/" + name
			u[name] = s.FS
		}
	}
	return u, nil
}

// union maps each migration's file name to the file system that holds it.
// Goose lists migrations with fs.Glob and opens them by name, so Glob and
// Open are all it needs.
type union map[string]fs.FS

func (u union) Open(name string) (fs.File, error) {
	fsys, ok := u[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return fsys.Open(name)
}

func (u union) Glob(pattern string) ([]string, error) {
	var out []string
	for name := range u {
		ok, err := path.Match(pattern, name)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Fingerprint is a short hash of every migration of schemas. Test helpers
// name their migrated template database after it, so one template serves
// every test run until a migration changes.
func Fingerprint(schemas ...Schema) (string, error) {
	fsys, err := Merge(schemas...)
	if err != nil {
		return "", err
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return "", fmt.Errorf("migrate fingerprint: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// errNoSchema guards against wiring that hands over nothing: goose would
// happily report an empty database as up to date.
var errNoSchema = errors.New("migrate: no schema given")
