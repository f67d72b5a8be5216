package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/cfgd/cfgd/deploy/config"
)

// ClickHouseVersionTable is where goose records the ClickHouse migrations
// applied, in the cfgd database itself.
const ClickHouseVersionTable = "goose_db_version"

// OpenClickHouse creates the database named in dsn if it is missing and
// returns a database/sql handle on it for goose.
func OpenClickHouse(ctx context.Context, dsn string) (*sql.DB, error) {
	return OpenClickHouseOn(ctx, dsn, "")
}

// OpenClickHouseOn is OpenClickHouse on every server of cluster (a plain
// identifier; empty: the one server of dsn): the database is created ON
// CLUSTER.
func OpenClickHouseOn(ctx context.Context, dsn, cluster string) (*sql.DB, error) {
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("clickhouse dsn: %w", config.RedactError(err, dsn))
	}
	if name := opts.Auth.Database; name != "" && name != "default" {
		admin := *opts
		admin.Auth.Database = "default"
		db := clickhouse.OpenDB(&admin)
		create := "CREATE DATABASE IF NOT EXISTS " + quoteIdent(name)
		if cluster != "" {
			create += " ON CLUSTER " + quoteIdent(cluster)
		}
		_, err := db.ExecContext(ctx, create)
		db.Close()
		if err != nil {
			return nil, fmt.Errorf("clickhouse: create database %s: %w", name, err)
		}
	}
	return clickhouse.OpenDB(opts), nil
}

// ClickHouseServerVersion is the server's version ("18.16.1"), for owners
// whose schema depends on it.
func ClickHouseServerVersion(ctx context.Context, db *sql.DB) (string, error) {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT version()").Scan(&v); err != nil {
		return "", fmt.Errorf("clickhouse version: %w", err)
	}
	return v, nil
}

// ClickHouse applies every pending migration of schemas to db's database.
// ClickHouse has no transactions or locks: each statement runs on its own,
// and the owners write their DDL so that a second process applying the
// same migration at the same time does no harm (IF NOT EXISTS).
func ClickHouse(ctx context.Context, db *sql.DB, log *slog.Logger, schemas ...Schema) error {
	p, err := NewClickHouseProvider(db, schemas...)
	if err != nil {
		return err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate clickhouse: %w", err)
	}
	logResults(ctx, log, "clickhouse", results)
	return nil
}

// NewClickHouseProvider is the goose provider over the union of schemas for
// a ClickHouse database, with the version store that works on 18.16.
func NewClickHouseProvider(db *sql.DB, schemas ...Schema) (*goose.Provider, error) {
	fsys, err := Merge(schemas...)
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(goose.DialectCustom, db, fsys,
		goose.WithStore(clickhouseStore{table: ClickHouseVersionTable, poll: 50 * time.Millisecond}),
		goose.WithIsolateDDL(true), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return nil, fmt.Errorf("migrate clickhouse: %w", err)
	}
	return p, nil
}

// clickhouseStore is goose's version table on ClickHouse 18.16 and later.
// Goose's own ClickHouse dialect does not run on 18.16: its INSERT … VALUES
// through Exec hangs (the native protocol wants a data block after VALUES)
// and its delete waits with SETTINGS mutations_sync, which 18.16 lacks. So
// rows go in through INSERT … SELECT, and a delete is a mutation polled in
// system.mutations until done.
type clickhouseStore struct {
	table string
	poll  time.Duration
}

var (
	_ database.Store         = clickhouseStore{}
	_ database.StoreExtender = clickhouseStore{}
)

func (s clickhouseStore) Tablename() string { return s.table }

func (s clickhouseStore) CreateVersionTable(ctx context.Context, db database.DBTxConn) error {
	_, err := db.ExecContext(ctx, fmt.Sprintf(createVersionTable, quoteIdent(s.table)))
	return err
}

const createVersionTable = `CREATE TABLE IF NOT EXISTS %s (
	version_id Int64,
	is_applied UInt8,
	tstamp DateTime DEFAULT now()
) ENGINE = MergeTree
ORDER BY (version_id, tstamp)`

func (s clickhouseStore) Insert(ctx context.Context, db database.DBTxConn, req database.InsertRequest) error {
	_, err := db.ExecContext(ctx, "INSERT INTO "+quoteIdent(s.table)+" (version_id, is_applied) SELECT ?, 1", req.Version)
	return err
}

func (s clickhouseStore) Delete(ctx context.Context, db database.DBTxConn, version int64) error {
	if _, err := db.ExecContext(ctx, "ALTER TABLE "+quoteIdent(s.table)+" DELETE WHERE version_id = ?", version); err != nil {
		return err
	}
	// The mutation runs in the background; goose reads the table next.
	for {
		var pending uint64
		if err := db.QueryRowContext(ctx, pendingMutations, s.table).Scan(&pending); err != nil {
			return fmt.Errorf("wait for the version delete: %w", err)
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.poll):
		}
	}
}

const pendingMutations = `SELECT count() FROM system.mutations
WHERE database = currentDatabase() AND table = ? AND is_done = 0`

func (s clickhouseStore) GetMigration(ctx context.Context, db database.DBTxConn, version int64) (*database.GetMigrationResult, error) {
	var (
		at      time.Time
		applied uint8
	)
	err := db.QueryRowContext(ctx, "SELECT tstamp, is_applied FROM "+quoteIdent(s.table)+
		" WHERE version_id = ? ORDER BY tstamp DESC LIMIT 1", version).Scan(&at, &applied)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, database.ErrVersionNotFound
	}
	if err != nil {
		return nil, err
	}
	return &database.GetMigrationResult{Timestamp: at, IsApplied: applied == 1}, nil
}

func (s clickhouseStore) GetLatestVersion(ctx context.Context, db database.DBTxConn) (int64, error) {
	var (
		rows   uint64
		latest int64
	)
	// max() of no rows is 0 in ClickHouse, not NULL: count tells them apart.
	if err := db.QueryRowContext(ctx, "SELECT count(), max(version_id) FROM "+quoteIdent(s.table)).Scan(&rows, &latest); err != nil {
		return 0, err
	}
	if rows == 0 {
		return 0, database.ErrVersionNotFound
	}
	return latest, nil
}

func (s clickhouseStore) ListMigrations(ctx context.Context, db database.DBTxConn) ([]*database.ListMigrationsResult, error) {
	// Two processes migrating at once may both record a version; it is
	// listed once.
	rows, err := db.QueryContext(ctx, "SELECT version_id, argMax(is_applied, tstamp) FROM "+quoteIdent(s.table)+
		" GROUP BY version_id ORDER BY version_id DESC")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*database.ListMigrationsResult
	for rows.Next() {
		var (
			v       int64
			applied uint8
		)
		if err := rows.Scan(&v, &applied); err != nil {
			return nil, err
		}
		out = append(out, &database.ListMigrationsResult{Version: v, IsApplied: applied == 1})
	}
	return out, rows.Err()
}

// TableExists says whether the version table is ready: there, with its
// zero version. Goose creates the table, then records the zero version in
// it; a second process starting meanwhile (ClickHouse has no lock) found
// the table empty and failed with "missing zero version migration". Told
// the table is not there yet, it creates it (IF NOT EXISTS) and records
// the zero version too, which ListMigrations lists once.
func (s clickhouseStore) TableExists(ctx context.Context, db database.DBTxConn) (bool, error) {
	var n uint64
	if err := db.QueryRowContext(ctx, "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = ?", s.table).Scan(&n); err != nil || n == 0 {
		return false, err
	}
	if err := db.QueryRowContext(ctx, "SELECT count() FROM "+quoteIdent(s.table)+" WHERE version_id = 0").Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

func quoteIdent(s string) string {
	out := []byte{'`'}
	for i := 0; i < len(s); i++ {
		if s[i] == '`' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(append(out, '`'))
}
