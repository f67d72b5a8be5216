package requestlogview

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// IdempotencyTable holds the answers of ingest calls sent with an
// Idempotency-Key (migration 00014).
const IdempotencyTable = "requestlog_idempotency"

// IdempotencyTTL is how long a key's answer is kept.
const IdempotencyTTL = 24 * time.Hour

// PG is what the idempotency store uses of a Postgres pool.
type PG interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Idempotency remembers ingest answers by (caller, key): the first call
// with a key claims it, runs, and stores its answer; a later call with the
// same key and body gets that answer without running, a call with another
// body is refused, and a call that arrives while the first still runs
// waits for its answer (up to Wait) or is refused as in progress.
type Idempotency struct {
	db   PG
	now  func() time.Time
	wait time.Duration
	// swept is when expired rows were last removed (unix nanoseconds).
	swept atomic.Int64
}

// NewIdempotency returns the store over db; a concurrent call with the
// same key waits up to wait for the first call's answer.
func NewIdempotency(db PG, now func() time.Time, wait time.Duration) *Idempotency {
	return &Idempotency{db: db, now: now, wait: wait}
}

// Answer is a stored answer: a transport's status and body.
type Answer struct {
	Status int
	Body   []byte
}

// AbandonedClaim is how long a claim may wait for its answer before
// another call with the key takes it over.
const AbandonedClaim = time.Minute

// MaxIdempotencyKey bounds a key, in bytes.
const MaxIdempotencyKey = 255

// Queries, by primary key or by the created_at index, so their generic
// plans use an index on an empty table too (idempotency_test.go).
const (
	claimKey = `INSERT INTO requestlog_idempotency (caller, key, body_hash, created_at) VALUES ($1, $2, $3, $4)
	ON CONFLICT (caller, key) DO NOTHING`
	readKey     = `SELECT body_hash, status, answer, created_at FROM requestlog_idempotency WHERE caller = $1 AND key = $2`
	dropExpired = `DELETE FROM requestlog_idempotency WHERE caller = $1 AND key = $2 AND (created_at < $3 OR (status IS NULL AND created_at < $4))`
	finishKey   = `UPDATE requestlog_idempotency SET status = $3, answer = $4 WHERE caller = $1 AND key = $2 AND status IS NULL`
	releaseKey  = `DELETE FROM requestlog_idempotency WHERE caller = $1 AND key = $2 AND status IS NULL`
	// The sweep looks at the oldest rows only, through the created_at
	// index (expired rows are always the oldest), in bounded steps: a
	// plain "created_at < $1" gets a sequential scan as its generic plan.
	sweepExpired = `DELETE FROM requestlog_idempotency WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM requestlog_idempotency ORDER BY created_at LIMIT 100)) AND created_at < $1`
)

// CheckKey returns the field error of a malformed key.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxIdempotencyKey {
		return errcode.Field("Idempotency-Key", fmt.Sprintf("must be 1 to %d bytes", MaxIdempotencyKey))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return errcode.Field("Idempotency-Key", "must be printable ASCII without spaces")
		}
	}
	return nil
}

// Claim claims key for caller's call with body hash. When the call is
// the first with the key (in 24 h) it returns nil, nil: run the call, then
// Finish (or Release when it failed and may be retried). When a call with
// the key already answered, it returns that answer. Otherwise the error is
// errcode Conflict: the key was used with another body, or its first call
// is still running after the wait.
func (s *Idempotency) Claim(ctx context.Context, caller, key string, hash []byte) (*Answer, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	now := s.now().UTC()
	s.sweep(ctx, now)
	// An answer older than the TTL is forgotten; a claim without an
	// answer long after any call could have ended is a process that died
	// mid-call: the key is free again.
	if _, err := s.db.Exec(ctx, dropExpired, caller, key, now.Add(-IdempotencyTTL), now.Add(-AbandonedClaim)); err != nil {
		return nil, fmt.Errorf("idempotency key: %w", err)
	}
	deadline := now.Add(s.wait)
	for {
		tag, err := s.db.Exec(ctx, claimKey, caller, key, hash, now)
		if err != nil {
			return nil, fmt.Errorf("idempotency key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return nil, nil
		}
		var stored []byte
		var status *int32
		var answer []byte
		var at time.Time
		err = s.db.QueryRow(ctx, readKey, caller, key).Scan(&stored, &status, &answer, &at)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // released or expired in between: claim again
		}
		if err != nil {
			return nil, fmt.Errorf("idempotency key: %w", err)
		}
		if subtle.ConstantTimeCompare(stored, hash) != 1 {
			return nil, errcode.New(errcode.Conflict, "this Idempotency-Key was used for another request body in the last 24 hours; use a new key")
		}
		if status != nil {
			return &Answer{Status: int(*status), Body: answer}, nil
		}
		if !time.Now().Before(deadline) {
			return nil, &errcode.Error{Code: errcode.Conflict, Message: "a request with this Idempotency-Key is still in progress; retry shortly", RetryAfter: time.Second}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Finish stores the answer of the call that claimed key.
func (s *Idempotency) Finish(ctx context.Context, caller, key string, a Answer) error {
	if _, err := s.db.Exec(ctx, finishKey, caller, key, a.Status, a.Body); err != nil {
		return fmt.Errorf("idempotency key: %w", err)
	}
	return nil
}

// Release gives key up after its call failed in a way a retry may fix
// (Kafka unavailable): the retry runs instead of getting the failure.
func (s *Idempotency) Release(ctx context.Context, caller, key string) error {
	if _, err := s.db.Exec(ctx, releaseKey, caller, key); err != nil {
		return fmt.Errorf("idempotency key: %w", err)
	}
	return nil
}

// sweep removes the expired rows, at most once a minute per process.
func (s *Idempotency) sweep(ctx context.Context, now time.Time) {
	last := s.swept.Load()
	if now.UnixNano()-last < int64(time.Minute) || !s.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	// Steps of 100 until a step finds fewer; a failed sweep only leaves
	// rows for the next one.
	for range 100 {
		tag, err := s.db.Exec(ctx, sweepExpired, now.Add(-IdempotencyTTL))
		if err != nil || tag.RowsAffected() < 100 {
			return
		}
	}
}
