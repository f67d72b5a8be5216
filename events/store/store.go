// Package store is the Postgres event store: append with an expected stream
// version inside the caller's transaction, and load a stream back. Its
// migrations (schema/) create the event store and the relay's and the
// projections' checkpoints.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
)

// DB is what a store call needs; *pgxpool.Pool, *pgx.Conn and pgx.Tx all
// satisfy it, so appends join whatever transaction the caller holds.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DefaultMaxEventBytes bounds one event as the relay encodes it (body,
// headers and key). It stays well below the producer's limit (sarama's
// Producer.MaxMessageBytes, 1 MiB) and the broker's (message.max.bytes,
// 1,048,588 bytes on Kafka and the embedded broker), so every stored event
// can be published: one that could not would stop the relay for good.
const DefaultMaxEventBytes = 900 << 10

// Config of the event store.
type Config struct {
	// MaxEventBytes bounds an event's encoded size at append time; default
	// DefaultMaxEventBytes.
	MaxEventBytes int
}

func (c *Config) setDefaults() {
	if c.MaxEventBytes == 0 {
		c.MaxEventBytes = DefaultMaxEventBytes
	}
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.MaxEventBytes < 0 {
		errs = append(errs, errors.New("event store: max event bytes must not be negative"))
	}
	if c.MaxEventBytes > DefaultMaxEventBytes {
		errs = append(errs, fmt.Errorf("event store: max event bytes %d is above %d, which the Kafka producer could not send", c.MaxEventBytes, DefaultMaxEventBytes))
	}
	return errors.Join(errs...)
}

// Store appends with the limits of its Config. The package functions Append
// and AppendMany are a Store with the default Config.
type Store struct {
	cfg Config
}

// New returns a store with cfg.
func New(cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{cfg: cfg}, nil
}

func defaultStore() *Store { return &Store{cfg: Config{MaxEventBytes: DefaultMaxEventBytes}} }

// ConflictError reports that the stream moved on since the caller loaded it,
// or that the append lost a race the database settled (a unique-index clash,
// a deadlock, a serialization failure, or a caller's transaction that is
// older than the stream's last append). The command retries from a fresh
// load.
type ConflictError struct {
	Stream   string
	Expected int64
	Actual   int64 // -1 when the version check itself passed
	Err      error // the database's error, when it reported the clash
}

func (e *ConflictError) Error() string {
	if e.Actual < 0 {
		if e.Err != nil {
			return fmt.Sprintf("stream %s: concurrent append at version %d: %v", e.Stream, e.Expected+1, e.Err)
		}
		return fmt.Sprintf("stream %s: concurrent append at version %d", e.Stream, e.Expected+1)
	}
	return fmt.Sprintf("stream %s: expected version %d, found %d", e.Stream, e.Expected, e.Actual)
}

func (e *ConflictError) Unwrap() error { return e.Err }

// TooLargeError reports an event whose encoding on the bus would exceed
// Config.MaxEventBytes. It is the caller's input that is wrong: retrying
// cannot help.
type TooLargeError struct {
	Stream string
	Type   string
	Bytes  int
	Max    int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("stream %s: event %s encodes to %d bytes, above the limit of %d", e.Stream, e.Type, e.Bytes, e.Max)
}

// As offers the error to transports as what it means to the caller
// (errcode.TooLarge), without the stream and type names.
func (e *TooLargeError) As(target any) bool {
	p, ok := target.(**errcode.Error)
	if ok {
		*p = errcode.Wrap(errcode.TooLarge, "the request would record more data than cfgd accepts in one event", e)
	}
	return ok
}

// IsConflict tells whether err is (or wraps) a ConflictError.
func IsConflict(err error) bool {
	var c *ConflictError
	return errors.As(err, &c)
}

// Version returns the current version of stream (0 when it has no events).
func Version(ctx context.Context, db DB, stream string) (int64, error) {
	var v int64
	err := db.QueryRow(ctx, `SELECT coalesce(max(stream_version), 0) FROM events WHERE stream_id = $1`, stream).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("stream %s version: %w", stream, err)
	}
	return v, nil
}

// Append stores envs at the end of stream, which must be at expected
// (events.NoStream for a new stream, events.AnyVersion to skip the check).
// It returns the envelopes with Version and Position filled in. On a clash it
// returns *ConflictError; the caller's transaction is then unusable and the
// whole command should be retried from a fresh load.
func Append(ctx context.Context, db DB, stream string, expected int64, envs ...events.Envelope) ([]events.Envelope, error) {
	return storeOf(db).AppendMany(ctx, db, Write{Stream: stream, Expected: expected, Events: envs})
}

// AppendMany is Store.AppendMany with the Config db is bound to (Bind),
// or the default one.
func AppendMany(ctx context.Context, db DB, writes ...Write) ([]events.Envelope, error) {
	return storeOf(db).AppendMany(ctx, db, writes...)
}

// Bind returns db carrying s: the package functions Append and AppendMany
// use s's limits for it. Command handlers take a DB, so the one built from
// settings (EVENTS__MAX_BYTES) reaches every append without each handler
// holding a Store.
func (s *Store) Bind(db DB) DB { return bound{DB: db, store: s} }

type bound struct {
	DB
	store *Store
}

func storeOf(db DB) *Store {
	if b, ok := db.(bound); ok {
		return b.store
	}
	return defaultStore()
}

// Append is the package function Append with s's limits.
func (s *Store) Append(ctx context.Context, db DB, stream string, expected int64, envs ...events.Envelope) ([]events.Envelope, error) {
	return s.AppendMany(ctx, db, Write{Stream: stream, Expected: expected, Events: envs})
}

// Write is one stream's part of an AppendMany.
type Write struct {
	Stream   string
	Expected int64 // events.NoStream, events.AnyVersion or the version last read
	Events   []events.Envelope
}

// appendSQL checks every stream's expected version and inserts every event
// in one statement, so a command that touches several streams commits them
// together in one round trip without an explicit transaction. Two writers
// that both pass the check collide on the unique (stream_id,
// stream_version) index, which becomes a ConflictError.
//
// It also refuses to append after a stream's last event when that event's
// transaction is younger than the caller's: the relay publishes in
// (tx_id, position) order, so the caller's event, a later version, would be
// published before the earlier one. That happens only when an append joins
// a caller's transaction that took its id before the other append ran.
const appendSQL = `/* cfgd:append */
	WITH w AS (
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::timestamptz[], $6::text[], $7::text[])
			WITH ORDINALITY AS u(id, stream, expected, t, o, m, d, ord)
	), cur AS (
		SELECT s.stream, s.expected, coalesce(l.stream_version, 0) AS v, l.tx_id
		FROM (SELECT DISTINCT stream, expected FROM w) s
		LEFT JOIN LATERAL (
			SELECT e.stream_version, e.tx_id FROM events e WHERE e.stream_id = s.stream
			ORDER BY e.stream_version DESC LIMIT 1
		) l ON true
	), ok AS (
		SELECT bool_and((expected < 0 OR v = expected) AND (tx_id IS NULL OR tx_id <= pg_current_xact_id())) AS ok FROM cur
	)
	INSERT INTO events (event_id, stream_id, stream_version, type, occurred_at, metadata, data)
	SELECT w.id, w.stream, cur.v + row_number() OVER (PARTITION BY w.stream ORDER BY w.ord), w.t, w.o, w.m::jsonb, w.d::jsonb
	FROM w JOIN cur ON cur.stream = w.stream, ok
	WHERE ok.ok
	ORDER BY w.ord
	RETURNING event_id, stream_version, position`

// AppendMany appends to several streams at once: either every write passes
// its version check and all events are stored, or nothing is and the first
// stream that moved is reported as *ConflictError. The result holds the
// envelopes in the order given, with Version and Position filled in. The
// rows are inserted in stream order, whatever the order given, so two
// commands that touch the same streams wait for each other instead of
// deadlocking. An event too large for the bus is *TooLargeError.
func (s *Store) AppendMany(ctx context.Context, db DB, writes ...Write) ([]events.Envelope, error) {
	n := 0
	for _, w := range writes {
		n += len(w.Events)
	}
	if n == 0 {
		return nil, nil
	}
	order := make([]int, len(writes)) // indexes of writes, by stream
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(writes[a].Stream, writes[b].Stream) })
	slot := make([]int, len(writes)) // where each write's events start in the result
	for i, k := 0, 0; i < len(writes); i++ {
		slot[i] = k
		k += len(writes[i].Events)
	}
	var (
		ids       = make([]uuid.UUID, 0, n)
		streams   = make([]string, 0, n)
		expecteds = make([]int64, 0, n)
		types     = make([]string, 0, n)
		times     = make([]time.Time, 0, n)
		metas     = make([]string, 0, n)
		datas     = make([]string, 0, n)
		out       = make([]events.Envelope, n)
		at        = make(map[uuid.UUID]int, n)
	)
	seen := make(map[string]bool, len(writes))
	for _, wi := range order {
		w := writes[wi]
		if seen[w.Stream] {
			return nil, fmt.Errorf("append: stream %s given twice", w.Stream)
		}
		seen[w.Stream] = true
		for j, e := range w.Events {
			if e.Stream != "" && e.Stream != w.Stream {
				return nil, fmt.Errorf("append to %s: envelope %s belongs to %s", w.Stream, e.ID, e.Stream)
			}
			e.Stream = w.Stream
			if err := s.checkSize(e); err != nil {
				return nil, err
			}
			md, err := json.Marshal(e.Metadata)
			if err != nil {
				return nil, fmt.Errorf("append to %s: metadata: %w", w.Stream, err)
			}
			at[e.ID] = slot[wi] + j
			ids, streams, expecteds = append(ids, e.ID), append(streams, w.Stream), append(expecteds, w.Expected)
			types, times = append(types, e.Type), append(times, e.OccurredAt)
			metas, datas = append(metas, string(md)), append(datas, string(e.Data))
			out[slot[wi]+j] = e
		}
	}
	if len(at) != n {
		return nil, errors.New("append: an event id is given twice")
	}
	rows, err := db.Query(ctx, appendSQL, ids, streams, expecteds, types, times, metas, datas)
	if err != nil {
		return nil, appendErr(writes, err)
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var (
			id      uuid.UUID
			version int64
			pos     int64
		)
		if err := rows.Scan(&id, &version, &pos); err != nil {
			return nil, appendErr(writes, err)
		}
		i, ok := at[id]
		if !ok {
			return nil, fmt.Errorf("append: unexpected event %s returned", id)
		}
		out[i].Version, out[i].Position = version, pos
		got++
	}
	if err := rows.Err(); err != nil {
		return nil, appendErr(writes, err)
	}
	if got == 0 {
		// A check failed; find which, only now, for the message.
		for _, w := range writes {
			if w.Expected < 0 || len(w.Events) == 0 {
				continue
			}
			actual, err := Version(ctx, db, w.Stream)
			if err != nil {
				return nil, err
			}
			if actual != w.Expected {
				return nil, &ConflictError{Stream: w.Stream, Expected: w.Expected, Actual: actual}
			}
		}
		// Every version matched: the caller's transaction is older than a
		// stream's last append (or, outside a transaction, the stream moved
		// back into line since). Either way a retry settles it.
		return nil, &ConflictError{Stream: writes[0].Stream, Expected: writes[0].Expected, Actual: -1,
			Err: errors.New("the stream's last append committed from a younger transaction")}
	}
	if got != n {
		return nil, fmt.Errorf("append: %d of %d events stored", got, n)
	}
	return out, nil
}

// checkSize refuses e when the relay's encoding of it (body, headers with
// the signature, key) could exceed the limit. Version and position are
// counted at their widest, since the database assigns them later.
func (s *Store) checkSize(e events.Envelope) error {
	e.Version, e.Position = math.MaxInt64, math.MaxInt64
	body, err := events.Marshal(e)
	if err != nil {
		return fmt.Errorf("append to %s: %w", e.Stream, err)
	}
	size := len(body) + len(e.Stream) + len(events.HeaderSignature) + events.SignatureLen + transportOverhead
	for k, v := range events.Headers(e) {
		size += len(k) + len(v)
	}
	if size > s.cfg.MaxEventBytes {
		return &TooLargeError{Stream: e.Stream, Type: e.Type, Bytes: size, Max: s.cfg.MaxEventBytes}
	}
	return nil
}

// transportOverhead covers what the bus adds to a record beyond the
// envelope's own headers (Watermill's message id header, record framing).
const transportOverhead = 256

// Postgres errors that mean "another transaction won": the command retries.
const (
	pgUniqueViolation      = "23505"
	pgSerializationFailure = "40001"
	pgDeadlockDetected     = "40P01"
)

func appendErr(writes []Write, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case pgUniqueViolation, pgSerializationFailure, pgDeadlockDetected:
			// The index names the clashing stream only in the detail text;
			// the first written stream is as good a name for a retry.
			for _, w := range writes {
				if strings.Contains(pg.Detail, "("+w.Stream+",") {
					return &ConflictError{Stream: w.Stream, Expected: w.Expected, Actual: -1, Err: err}
				}
			}
			return &ConflictError{Stream: writes[0].Stream, Expected: writes[0].Expected, Actual: -1, Err: err}
		}
	}
	if len(writes) == 1 {
		return fmt.Errorf("append to %s: %w", writes[0].Stream, err)
	}
	return fmt.Errorf("append to %d streams: %w", len(writes), err)
}

const selectEnvelope = `SELECT event_id, stream_id, stream_version, position, type, occurred_at, metadata, data FROM events`

// LoadMany returns the events of each stream in version order, in one round
// trip; a stream without events maps to nil.
func LoadMany(ctx context.Context, db DB, streams ...string) (map[string][]events.Envelope, error) {
	// One index lookup per stream. The plainer "stream_id = ANY($1)" gets
	// a sequential scan as its generic plan when the connection first
	// prepares it on a young, small table, and keeps it while the table
	// grows.
	rows, err := db.Query(ctx, loadStreams, streams)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", strings.Join(streams, ", "), err)
	}
	all, err := collect(rows, "load "+strings.Join(streams, ", "))
	if err != nil {
		return nil, err
	}
	out := make(map[string][]events.Envelope, len(streams))
	for _, e := range all {
		out[e.Stream] = append(out[e.Stream], e)
	}
	return out, nil
}

// loadStreams reads the streams of $1, one index lookup per stream.
const loadStreams = `
	SELECT e.event_id, e.stream_id, e.stream_version, e.position, e.type, e.occurred_at, e.metadata, e.data
	FROM unnest($1::text[]) AS s(id)
	CROSS JOIN LATERAL (SELECT * FROM events WHERE stream_id = s.id ORDER BY stream_version) e`

// Load returns every event of stream in version order.
func Load(ctx context.Context, db DB, stream string) ([]events.Envelope, error) {
	rows, err := db.Query(ctx, selectEnvelope+` WHERE stream_id = $1 ORDER BY stream_version`, stream)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", stream, err)
	}
	return collect(rows, "load "+stream)
}

// ReadAll returns up to limit events with position > after, in position
// order. Replay and tools use it; the relay has its own commit-order query.
func ReadAll(ctx context.Context, db DB, after int64, limit int) ([]events.Envelope, error) {
	rows, err := db.Query(ctx, selectEnvelope+` WHERE position > $1 ORDER BY position LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read all after %d: %w", after, err)
	}
	return collect(rows, "read all")
}

// Scan reads one envelope from rows selected with the column order of Load.
func Scan(rows pgx.Rows) (events.Envelope, error) { return ScanAfter(rows) }

// ScanAfter is Scan for a query that selects more columns before the
// envelope's: they are scanned into before, in order.
func ScanAfter(rows pgx.Rows, before ...any) (events.Envelope, error) {
	var e events.Envelope
	var md []byte
	// Data as plain bytes: scanned as a json.RawMessage, pgx would run it
	// through json.Unmarshal, which validates what jsonb already did and
	// took a third of a replay's reading.
	dst := append(before, &e.ID, &e.Stream, &e.Version, &e.Position, &e.Type, &e.OccurredAt, &md, (*[]byte)(&e.Data))
	if err := rows.Scan(dst...); err != nil {
		return e, err
	}
	if err := json.Unmarshal(md, &e.Metadata); err != nil {
		return e, fmt.Errorf("metadata of %s: %w", e.ID, err)
	}
	e.OccurredAt = e.OccurredAt.UTC()
	return e, nil
}

func collect(rows pgx.Rows, what string) ([]events.Envelope, error) {
	defer rows.Close()
	var out []events.Envelope
	for rows.Next() {
		e, err := Scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
