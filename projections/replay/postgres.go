package replay

// The Postgres target rebuilds a projection from the event store. The
// projection is applied, from the first event on, into shadow copies of its
// tables in a schema of their own (replay_<name>) that also holds a copy of
// projection_checkpoints, through a dedicated connection whose search_path
// puts that schema before public: the handlers' unqualified table names
// then land in the shadow tables and nothing live is written. Once the
// shadow has caught up, one transaction locks the live tables and the
// checkpoints, applies what arrived meanwhile, drops the live tables, moves
// the shadow ones into public and replaces the projection's checkpoints:
// readers see the old tables until that commit and the new ones after it.
//
// Until the shadow has caught up, its checkpoints are kept in memory
// (projections.ApplyTxMem) and written once, before the swap: the replay
// alone writes the shadow and reads the log in order. What the log holds
// when the replay starts is read on a second connection, a batch ahead of
// the one being applied (bulk.go).
//
// Events are read like the relay publishes them, in (tx_id, position)
// order below the oldest running transaction, so a transaction that commits
// late with a lower position is never stepped over.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/projections"
)

// Config tunes a Postgres replay.
type Config struct {
	// BatchSize is how many events one transaction applies.
	BatchSize int
	// LockTimeout bounds each of the swap's attempts to lock the live
	// tables (a projection batch or a long query holding them); readers
	// arriving meanwhile queue behind the request, so keep it short.
	LockTimeout time.Duration
	// FeedProgress, when set, is called as the projection's feeds read
	// their topics (see projections.Feed).
	FeedProgress FeedProgress
	// AllowPartial is ClickHouseConfig.AllowPartial for a run of the
	// request-log tables.
	AllowPartial bool
}

// FeedProgress reports a feed's records read out of those to read.
type FeedProgress func(feed string, read, total int64)

// Defaults: see Config.
const (
	DefaultBatchSize   = 1000
	DefaultLockTimeout = 2 * time.Second
)

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = DefaultLockTimeout
	}
	return c
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.BatchSize < 1 || c.BatchSize > 100_000 {
		errs = append(errs, fmt.Errorf("replay: batch size %d is outside 1..100000", c.BatchSize))
	}
	if c.LockTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("replay: lock timeout %v is under 1ms", c.LockTimeout))
	}
	return errors.Join(errs...)
}

// ErrReactor refuses a reactor: its handlers have side effects.
var ErrReactor = errors.New("is a reactor; replay never runs reactors")

// Postgres is the Target of a Postgres projection.
type Postgres struct {
	pool   *pgxpool.Pool
	reg    *events.Registry
	p      *projections.Projection
	cfg    Config
	schema string
	// progress is the run's, set by Shadow.
	progress Progress
	conn     *pgx.Conn
	// mem holds the shadow's checkpoints until the shadow has caught up;
	// they are written then, and the swap's catch-up uses the table.
	mem    *projections.Checkpoints
	cursor cursor
	res    Result
	total  int64
}

var _ Target = (*Postgres)(nil)

// NewPostgres returns the target that rebuilds p from the event store of
// pool, decoding events with reg; it refuses a reactor.
func NewPostgres(pool *pgxpool.Pool, reg *events.Registry, p *projections.Projection, cfg Config) (*Postgres, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if p.Reactor {
		return nil, fmt.Errorf("replay %s: %w", p.Name, ErrReactor)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return &Postgres{pool: pool, reg: reg, p: p, cfg: cfg, schema: SchemaName(p.Name)}, nil
}

// Run rebuilds p from the event store and swaps the rebuilt tables in:
// Rebuild with NewPostgres's target.
func Run(ctx context.Context, pool *pgxpool.Pool, reg *events.Registry, p *projections.Projection, cfg Config, progress Progress) (Result, error) {
	t, err := NewPostgres(pool, reg, p, cfg)
	if err != nil {
		return Result{}, err
	}
	return Rebuild(ctx, pool, t, progress)
}

var unsafe = regexp.MustCompile(`[^a-z0-9_]+`)

// SchemaName is the shadow schema of the projection called name.
func SchemaName(name string) string {
	s := "replay_" + unsafe.ReplaceAllString(strings.ToLower(name), "_")
	if len(s) > 50 {
		h := fnv.New32a()
		h.Write([]byte(name))
		s = fmt.Sprintf("%s_%08x", s[:40], h.Sum32())
	}
	return s
}

// cursor is the last event read, in relay order.
type cursor struct{ txID, position int64 }

// Name implements Target.
func (r *Postgres) Name() string { return r.p.Name }

// Result implements Target.
func (r *Postgres) Result() Result { return r.res }

// Shadow implements Target: it (re)creates the shadow schema and applies
// the log and the feeds into it up to the end.
func (r *Postgres) Shadow(ctx context.Context, progress Progress) error {
	r.progress = progress
	cc := r.pool.Config().ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	// The handlers' unqualified names resolve to the shadow tables first.
	cc.RuntimeParams["search_path"] = r.schema + ", public"
	// The shadow build's commits need not wait for the WAL flush: a crash
	// loses at most its last batches, and an interrupted replay starts
	// over anyway. The swap commits durably (and so flushes them too).
	cc.RuntimeParams["synchronous_commit"] = "off"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	r.conn = conn
	if err := r.createShadow(ctx); err != nil {
		return err
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&r.total); err != nil {
		return fmt.Errorf("count events: %w", err)
	}
	r.progress(0, r.total)
	r.mem = projections.NewCheckpoints(r.p)
	if err := r.bulk(ctx); err != nil {
		return err
	}
	if err := r.drain(ctx); err != nil {
		return err
	}
	if err := r.rebuildFeeds(ctx); err != nil {
		return err
	}
	return r.writeCheckpoints(ctx)
}

// Swap implements Target: it catches up and moves the shadow tables into
// public in one transaction, retrying while readers hold the live ones.
func (r *Postgres) Swap(ctx context.Context) error {
	if err := r.swapRetrying(ctx); err != nil {
		return err
	}
	r.close(ctx)
	return nil
}

// Drop implements Target: only the shadow schema is dropped, the live
// tables were never written.
func (r *Postgres) Drop(ctx context.Context) error {
	drop := `DROP SCHEMA IF EXISTS ` + ident(r.schema) + ` CASCADE`
	var err error
	// A cancelled query closes the connection: the pool drops the schema
	// then.
	if r.conn != nil && !r.conn.IsClosed() {
		_, err = r.conn.Exec(ctx, drop)
	} else {
		_, err = r.pool.Exec(ctx, drop)
	}
	r.close(ctx)
	return err
}

func (r *Postgres) close(ctx context.Context) {
	if r.conn == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = r.conn.Close(cctx)
	r.conn = nil
}

func ident(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// createShadow (re)creates the shadow schema: each table like the live one
// with its constraints and indexes under their live names (so a later
// migration that names them still finds them after the swap), and an
// empty projection_checkpoints.
func (r *Postgres) createShadow(ctx context.Context) error {
	// Definitions are read through the pool (default search_path), so a
	// foreign key names its table unqualified and, created on the replay
	// connection, points at the shadow table.
	type def struct{ table, name, sql string }
	rows, err := r.pool.Query(ctx, `
		SELECT c.relname, k.conname, pg_get_constraintdef(k.oid)
		FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relname = ANY($1) AND k.contype IN ('p', 'u', 'f', 'x')
		ORDER BY k.contype = 'f', c.relname, k.conname`, r.p.Tables)
	if err != nil {
		return fmt.Errorf("read constraints: %w", err)
	}
	var cons []def
	var d def
	if _, err := pgx.ForEachRow(rows, []any{&d.table, &d.name, &d.sql}, func() error { cons = append(cons, d); return nil }); err != nil {
		return fmt.Errorf("read constraints: %w", err)
	}
	rows, err = r.pool.Query(ctx, `
		SELECT c.relname, i.relname, pg_get_indexdef(i.oid)
		FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relname = ANY($1)
		  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid AND k.conrelid = x.indrelid)
		ORDER BY 1, 2`, r.p.Tables)
	if err != nil {
		return fmt.Errorf("read indexes: %w", err)
	}
	var idx []def
	if _, err := pgx.ForEachRow(rows, []any{&d.table, &d.name, &d.sql}, func() error { idx = append(idx, d); return nil }); err != nil {
		return fmt.Errorf("read indexes: %w", err)
	}

	s := ident(r.schema)
	stmts := []string{`DROP SCHEMA IF EXISTS ` + s + ` CASCADE`, `CREATE SCHEMA ` + s}
	for _, t := range r.p.Tables {
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING ALL EXCLUDING INDEXES)`, ident(r.schema, t), ident("public", t)))
	}
	for _, c := range cons {
		stmts = append(stmts, fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s %s`, ident(r.schema, c.table), ident(c.name), c.sql))
	}
	for _, i := range idx {
		on := " ON " + ident("public", i.table) + " "
		if !strings.Contains(i.sql, on) {
			on = " ON public." + i.table + " "
		}
		if !strings.Contains(i.sql, on) {
			return fmt.Errorf("cannot copy index %s: %s", i.name, i.sql)
		}
		stmts = append(stmts, strings.Replace(i.sql, on, " ON "+ident(r.schema, i.table)+" ", 1))
	}
	stmts = append(stmts, fmt.Sprintf(`CREATE TABLE %s (LIKE public.projection_checkpoints INCLUDING ALL)`, ident(r.schema, "projection_checkpoints")))
	err = pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error {
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create shadow tables: %w", err)
	}
	return nil
}

// writeCheckpoints writes the checkpoints held in memory into the shadow's
// table; from then on the batches use the table.
func (r *Postgres) writeCheckpoints(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error { return r.mem.Copy(ctx, tx) })
	if err != nil {
		return err
	}
	r.mem = nil
	return nil
}

// batch applies the next batch of events in a transaction of its own and
// returns how many it read.
func (r *Postgres) batch(ctx context.Context) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error {
		var err error
		n, err = r.applyNext(ctx, tx)
		return err
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		// Outside the transaction: a slow reporter must not hold back
		// the relay, which waits for the oldest running transaction.
		r.progress(r.res.Events, r.total)
	}
	return n, nil
}

// applyNext reads the events after the cursor in relay order, applies them
// in tx and moves the cursor (which only counts once tx commits: a failed
// batch ends the replay).
func (r *Postgres) applyNext(ctx context.Context, tx pgx.Tx) (int, error) {
	batch, next, err := r.read(ctx, tx, r.cursor)
	if err != nil {
		return 0, err
	}
	if err := r.apply(ctx, tx, batch, next); err != nil {
		return 0, err
	}
	return len(batch), nil
}

// read reads up to a batch of events after cur, in relay order, below the
// oldest running transaction, and returns them with the cursor after them.
func (r *Postgres) read(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, cur cursor) ([]events.Envelope, cursor, error) {
	rows, err := db.Query(ctx, `
		SELECT tx_id::text::bigint, event_id, stream_id, stream_version, position, type, occurred_at, metadata, data
		FROM public.events
		WHERE (tx_id, position) > ($1::bigint::text::xid8, $2)
		  AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY events.tx_id, events.position
		LIMIT $3`, cur.txID, cur.position, r.cfg.BatchSize)
	if err != nil {
		return nil, cur, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	batch := make([]events.Envelope, 0, r.cfg.BatchSize)
	next := cur
	for rows.Next() {
		e, err := store.ScanAfter(rows, &next.txID)
		if err != nil {
			return nil, cur, fmt.Errorf("read events: %w", err)
		}
		next.position = e.Position
		batch = append(batch, e)
	}
	if err := rows.Err(); err != nil {
		return nil, cur, fmt.Errorf("read events: %w", err)
	}
	return batch, next, nil
}

// apply applies batch, read after the cursor up to next, in tx and moves
// the cursor.
func (r *Postgres) apply(ctx context.Context, tx pgx.Tx, batch []events.Envelope, next cursor) error {
	var applied int
	var err error
	if r.mem != nil {
		applied, err = projections.ApplyTxMem(ctx, tx, r.reg, r.p, batch, r.mem)
	} else {
		applied, err = projections.ApplyTx(ctx, tx, r.reg, r.p, batch)
	}
	if err != nil {
		return err
	}
	r.cursor = next
	r.res.Events += int64(len(batch))
	r.res.Applied += int64(applied)
	if r.res.Events > r.total {
		r.total = r.res.Events
	}
	return nil
}

// swapAttempts bounds how often the swap waits LockTimeout for the live
// tables before the replay gives up.
const swapAttempts = 5

// lockNotAvailable is the SQLSTATE of a lock_timeout.
const lockNotAvailable = "55P03"

// swapRetrying runs swap until it gets its locks. A waiting ACCESS
// EXCLUSIVE request queues every new reader behind it, so each attempt
// waits only LockTimeout and then lets the readers through for a moment.
func (r *Postgres) swapRetrying(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		cur, res := r.cursor, r.res
		err := r.swap(ctx)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != lockNotAvailable || attempt == swapAttempts {
			return err
		}
		// The rolled-back catch-up is read again.
		r.cursor, r.res = cur, res
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// swap catches up and replaces the live tables in one transaction. It
// locks the live tables first (waiting for a projection batch that holds
// them to commit), then the checkpoints against writes: from then on no
// projection moves a checkpoint, so every event the live tables reflect is
// committed and read by the catch-up, and the checkpoints copied match
// the tables moved in. A runner batch that waited on the locks finds its
// events already applied (its checkpoint write misses and it retries them
// as duplicates) or applies later ones on the new tables.
func (r *Postgres) swap(ctx context.Context) error {
	live := make([]string, len(r.p.Tables))
	for i, t := range r.p.Tables {
		live[i] = ident("public", t)
	}
	begin := fmt.Sprintf("BEGIN; SET LOCAL synchronous_commit = on; SET LOCAL lock_timeout = %d", r.cfg.LockTimeout.Milliseconds())
	err := pgx.BeginTxFunc(ctx, r.conn, pgx.TxOptions{BeginQuery: begin}, func(tx pgx.Tx) error {
		if err := r.lockFeeds(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+strings.Join(live, ", ")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("lock live tables: %w", err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE public.projection_checkpoints IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("lock checkpoints: %w", err)
		}
		for {
			n, err := r.applyNext(ctx, tx)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
		}
		if err := r.catchUpFeeds(ctx, tx); err != nil {
			return err
		}
		stmts := []string{`DROP TABLE ` + strings.Join(live, ", ")}
		for _, t := range r.p.Tables {
			stmts = append(stmts, fmt.Sprintf(`ALTER TABLE %s SET SCHEMA public`, ident(r.schema, t)))
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		// The live checkpoints become the shadow's. Only the rows that
		// differ are written: when the live projection is caught up that
		// is none, where deleting and inserting every stream's row took
		// seconds under the locks.
		shadow := ident(r.schema, "projection_checkpoints")
		if _, err := tx.Exec(ctx, `DELETE FROM public.projection_checkpoints c WHERE c.projection = $1
			AND NOT EXISTS (SELECT 1 FROM `+shadow+` s WHERE s.projection = c.projection AND s.stream_id = c.stream_id AND s.version = c.version)`, r.p.Name); err != nil {
			return fmt.Errorf("replace checkpoints: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO public.projection_checkpoints SELECT * FROM `+shadow+` s
			WHERE NOT EXISTS (SELECT 1 FROM public.projection_checkpoints c
				WHERE c.projection = s.projection AND c.stream_id = s.stream_id AND c.version = s.version)`); err != nil {
			return fmt.Errorf("replace checkpoints: %w", err)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO public.projection_positions (projection, position, updated_at) VALUES ($1, $2, now())
			ON CONFLICT (projection) DO UPDATE SET position = greatest(projection_positions.position, excluded.position), updated_at = now()`,
			r.p.Name, r.cursor.position); err != nil {
			return fmt.Errorf("projection position: %w", err)
		}
		if _, err := tx.Exec(ctx, `DROP SCHEMA `+ident(r.schema)+` CASCADE`); err != nil {
			return fmt.Errorf("drop shadow schema: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("swap: %w", err)
	}
	r.progress(r.res.Events, r.total)
	return nil
}

// postgresStatus reports p's checkpointed streams, the highest store
// position it applied (as the runner last flushed it) and the store's
// highest minus that.
func postgresStatus(ctx context.Context, pool *pgxpool.Pool, p *projections.Projection) (Status, error) {
	var s Status
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM projection_checkpoints WHERE projection = $1),
		coalesce((SELECT position FROM projection_positions WHERE projection = $1), 0),
		(SELECT coalesce(max(position), 0) FROM events)`, p.Name).Scan(&s.Streams, &s.Position, &s.Lag)
	if err != nil {
		return s, fmt.Errorf("replay list %s: %w", p.Name, err)
	}
	s.Lag = max(s.Lag-s.Position, 0)
	return s, nil
}
