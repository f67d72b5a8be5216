// Package store is the Postgres event store: append with an expected stream
// version inside the caller's transaction, and load a stream back.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	if len(envs) == 0 {
		return nil, nil
	}
	n := len(envs)
	ids := make([]uuid.UUID, n)
	types := make([]string, n)
	times := make([]time.Time, n)
	metas := make([]string, n)
	datas := make([]string, n)
	out := make([]events.Envelope, n)
	for i, e := range envs {
		if e.Stream != "" && e.Stream != stream {
			return nil, fmt.Errorf("append to %s: envelope %s belongs to %s", stream, e.ID, e.Stream)
		}
		e.Stream = stream
		md, err := json.Marshal(e.Metadata)
		if err != nil {
			return nil, fmt.Errorf("append to %s: metadata: %w", stream, err)
		}
		ids[i], types[i], times[i], metas[i], datas[i] = e.ID, e.Type, e.OccurredAt, string(md), string(e.Data)
		out[i] = e
	}
	// One round trip: the version check and the insert are one statement.
	// Two writers that both pass the check collide on the unique
	// (stream_id, stream_version) index, which becomes a ConflictError.
	rows, err := db.Query(ctx, `
		WITH cur AS (SELECT coalesce(max(stream_version), 0) AS v FROM events WHERE stream_id = $2)
		INSERT INTO events (event_id, stream_id, stream_version, type, occurred_at, metadata, data)
		SELECT u.id, $2, cur.v + u.ord, u.t, u.o, u.m::jsonb, u.d::jsonb
		FROM cur, unnest($1::uuid[], $3::text[], $4::timestamptz[], $5::text[], $6::text[]) WITH ORDINALITY AS u(id, t, o, m, d, ord)
		WHERE $7::bigint < 0 OR cur.v = $7::bigint
		ORDER BY u.ord
		RETURNING stream_version, position`,
		ids, stream, types, times, metas, datas, expected)
	if err != nil {
		return nil, appendErr(stream, expected, err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		if i >= n {
			return nil, fmt.Errorf("append to %s: more rows returned than appended", stream)
		}
		if err := rows.Scan(&out[i].Version, &out[i].Position); err != nil {
			return nil, appendErr(stream, expected, err)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		return nil, appendErr(stream, expected, err)
	}
	if i == 0 {
		// The check failed; look up the version only now, for the message.
		actual, err := Version(ctx, db, stream)
		if err != nil {
			return nil, err
		}
		return nil, &ConflictError{Stream: stream, Expected: expected, Actual: actual}
	}
	return out, nil
}

func appendErr(stream string, expected int64, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "23505" {
		return &ConflictError{Stream: stream, Expected: expected, Actual: -1}
	}
	return fmt.Errorf("append to %s: %w", stream, err)
}

const selectEnvelope = `SELECT event_id, stream_id, stream_version, position, type, occurred_at, metadata, data FROM events`

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
