// Package store is the Postgres event store: append with an expected stream
// version inside the caller's transaction, and load a stream back.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cfgd/cfgd/events"
)

// DB is what a store call needs; *pgxpool.Pool, *pgx.Conn and pgx.Tx all
// satisfy it, so appends join whatever transaction the caller holds.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ConflictError reports that the stream moved on since the caller loaded it.
type ConflictError struct {
	Stream   string
	Expected int64
	Actual   int64 // -1 when only the unique index told us
}

func (e *ConflictError) Error() string {
	if e.Actual < 0 {
		return fmt.Sprintf("stream %s: concurrent append at version %d", e.Stream, e.Expected+1)
	}
	return fmt.Sprintf("stream %s: expected version %d, found %d", e.Stream, e.Expected, e.Actual)
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
	return AppendMany(ctx, db, Write{Stream: stream, Expected: expected, Events: envs})
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
const appendSQL = `/* cfgd:append */
	WITH w AS (
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::timestamptz[], $6::text[], $7::text[])
			WITH ORDINALITY AS u(id, stream, expected, t, o, m, d, ord)
	), cur AS (
		SELECT s.stream, s.expected,
			coalesce((SELECT max(e.stream_version) FROM events e WHERE e.stream_id = s.stream), 0) AS v
		FROM (SELECT DISTINCT stream, expected FROM w) s
	), ok AS (
		SELECT bool_and(expected < 0 OR v = expected) AS ok FROM cur
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
// envelopes in the order given, with Version and Position filled in.
func AppendMany(ctx context.Context, db DB, writes ...Write) ([]events.Envelope, error) {
	n := 0
	for _, w := range writes {
		n += len(w.Events)
	}
	if n == 0 {
		return nil, nil
	}
	var (
		ids       = make([]uuid.UUID, 0, n)
		streams   = make([]string, 0, n)
		expecteds = make([]int64, 0, n)
		types     = make([]string, 0, n)
		times     = make([]time.Time, 0, n)
		metas     = make([]string, 0, n)
		datas     = make([]string, 0, n)
		out       = make([]events.Envelope, 0, n)
		at        = make(map[uuid.UUID]int, n)
	)
	seen := make(map[string]bool, len(writes))
	for _, w := range writes {
		if seen[w.Stream] {
			return nil, fmt.Errorf("append: stream %s given twice", w.Stream)
		}
		seen[w.Stream] = true
		for _, e := range w.Events {
			if e.Stream != "" && e.Stream != w.Stream {
				return nil, fmt.Errorf("append to %s: envelope %s belongs to %s", w.Stream, e.ID, e.Stream)
			}
			e.Stream = w.Stream
			md, err := json.Marshal(e.Metadata)
			if err != nil {
				return nil, fmt.Errorf("append to %s: metadata: %w", w.Stream, err)
			}
			at[e.ID] = len(out)
			ids, streams, expecteds = append(ids, e.ID), append(streams, w.Stream), append(expecteds, w.Expected)
			types, times = append(types, e.Type), append(times, e.OccurredAt)
			metas, datas = append(metas, string(md)), append(datas, string(e.Data))
			out = append(out, e)
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
		// The stream moved back into line since (impossible inside a
		// transaction, a race outside one): still a conflict.
		return nil, &ConflictError{Stream: writes[0].Stream, Expected: writes[0].Expected, Actual: -1}
	}
	if got != n {
		return nil, fmt.Errorf("append: %d of %d events stored", got, n)
	}
	return out, nil
}

func appendErr(writes []Write, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "23505" {
		// The index names the clashing stream only in the detail text; the
		// first written stream is as good a name for a retry.
		for _, w := range writes {
			if strings.Contains(pg.Detail, "("+w.Stream+",") {
				return &ConflictError{Stream: w.Stream, Expected: w.Expected, Actual: -1}
			}
		}
		return &ConflictError{Stream: writes[0].Stream, Expected: writes[0].Expected, Actual: -1}
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
	rows, err := db.Query(ctx, `
		SELECT e.event_id, e.stream_id, e.stream_version, e.position, e.type, e.occurred_at, e.metadata, e.data
		FROM unnest($1::text[]) AS s(id)
		CROSS JOIN LATERAL (SELECT * FROM events WHERE stream_id = s.id ORDER BY stream_version) e`, streams)
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
func Scan(rows pgx.Rows) (events.Envelope, error) {
	var e events.Envelope
	var md []byte
	if err := rows.Scan(&e.ID, &e.Stream, &e.Version, &e.Position, &e.Type, &e.OccurredAt, &md, &e.Data); err != nil {
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
