// Package schemas lists the packages that own cfgd's tables and hands
// their migrations to deploy/migrate. cmd/cfgd (serve, migrate, the
// commands that write) and the test rig all migrate through it, so a new
// owner is added in one place.
package schemas

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/deploy/migrate"
	"github.com/cfgd/cfgd/events/signing"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
	"github.com/cfgd/cfgd/readmodels/identityview"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// Postgres are the owners' Postgres migrations. Their versions are numbered
// across owners (one goose version table).
func Postgres() ([]migrate.Schema, error) {
	owners := []struct {
		name   string
		schema func() (fs.FS, error)
	}{
		{"events/store", store.PostgresSchema},
		{"readmodels/identityview", identityview.PostgresSchema},
		{"readmodels/apikeyview", apikeyview.PostgresSchema},
		{"readmodels/taskview", taskview.PostgresSchema},
		{"readmodels/requestlogview", requestlogview.PostgresSchema},
		{"events/signing", signing.PostgresSchema},
	}
	out := make([]migrate.Schema, 0, len(owners))
	for _, o := range owners {
		fsys, err := o.schema()
		if err != nil {
			return nil, fmt.Errorf("schema of %s: %w", o.name, err)
		}
		out = append(out, migrate.Schema{Owner: o.name, FS: fsys})
	}
	return out, nil
}

// ClickHouse are the owners' ClickHouse migrations for db's server (and
// cluster c, if any), refused when the server is too old for them.
func ClickHouse(ctx context.Context, db *sql.DB, c ...requestlogview.Cluster) ([]migrate.Schema, error) {
	v, err := migrate.ClickHouseServerVersion(ctx, db)
	if err != nil {
		return nil, err
	}
	return ClickHouseFor(v, c...)
}

// ClickHouseFor is ClickHouse for a server of the given version (or every
// server of cluster c).
func ClickHouseFor(version string, c ...requestlogview.Cluster) ([]migrate.Schema, error) {
	fsys, err := requestlogview.ClickHouseSchema(version, c...)
	if err != nil {
		return nil, err
	}
	return []migrate.Schema{{Owner: "readmodels/requestlogview", FS: fsys}}, nil
}

// UpPostgres applies every pending Postgres migration.
func UpPostgres(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	s, err := Postgres()
	if err != nil {
		return err
	}
	return migrate.Postgres(ctx, pool, log, s...)
}

// UpClickHouse creates the database named in dsn if it is missing and
// applies every pending ClickHouse migration to it.
func UpClickHouse(ctx context.Context, dsn string, log *slog.Logger) error {
	return UpClickHouseOn(ctx, dsn, "", log)
}

// UpClickHouseOn is UpClickHouse on ClickHouse cluster cluster (empty: the
// one server of dsn): database, tables and views are created ON CLUSTER,
// through the server dsn names. Goose's version table stays on that server:
// migrating through another one runs the (idempotent) DDL again.
func UpClickHouseOn(ctx context.Context, dsn, cluster string, log *slog.Logger) error {
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("clickhouse dsn: %w", config.RedactError(err, dsn))
	}
	c := requestlogview.Cluster{Name: cluster, Database: cmp.Or(opts.Auth.Database, "default")}
	if err := c.Validate(); err != nil {
		return err
	}
	db, err := migrate.OpenClickHouseOn(ctx, dsn, cluster)
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := ClickHouse(ctx, db, c)
	if err != nil {
		return err
	}
	return migrate.ClickHouse(ctx, db, log, s...)
}

// Fingerprint is a short hash of the Postgres migrations (migrate.Fingerprint).
func Fingerprint() (string, error) {
	s, err := Postgres()
	if err != nil {
		return "", err
	}
	return migrate.Fingerprint(s...)
}

// PlanPostgres is every Postgres migration with its state on pool's
// database (`cfgd migrate status`, `--dry-run`); it changes nothing.
func PlanPostgres(ctx context.Context, pool *pgxpool.Pool) ([]migrate.Step, error) {
	s, err := Postgres()
	if err != nil {
		return nil, err
	}
	return migrate.PostgresPlan(ctx, pool, s...)
}

// PlanClickHouse is every ClickHouse migration, rendered as UpClickHouseOn
// would render it for that server (and cluster), with its state in the
// database dsn names; it creates nothing.
func PlanClickHouse(ctx context.Context, dsn, cluster string) ([]migrate.Step, error) {
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("clickhouse dsn: %w", err)
	}
	c := requestlogview.Cluster{Name: cluster, Database: cmp.Or(opts.Auth.Database, "default")}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	admin := *opts
	admin.Auth.Database = "default"
	db := clickhouse.OpenDB(&admin)
	defer db.Close()
	s, err := ClickHouse(ctx, db, c)
	if err != nil {
		return nil, err
	}
	return migrate.ClickHousePlan(ctx, dsn, s...)
}
