package requestlogview

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
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

// Idempotency remembers ingest outcomes by (caller, key), the store of
// requestlog's idempotency protocol (requestlog.KeyStore): the first call
// with a key claims it, runs, and stores its outcome; a later call with
// the same key and body gets that outcome without running, a call with
// another body is refused, and a call that arrives while the first still
// runs waits for its outcome (up to Wait) or is refused as in progress.
// What one caller may hold is bounded (CallerBytes).
type Idempotency struct {
	db          PG
	now         func() time.Time
	wait        time.Duration
	callerBytes int64
	// swept is when expired rows were last removed (unix nanoseconds).
	swept atomic.Int64
}

var _ requestlog.KeyStore = (*Idempotency)(nil)

// NewIdempotency returns the store over db; a concurrent call with the
// same key waits up to wait for the first call's outcome.
func NewIdempotency(db PG, now func() time.Time, wait time.Duration) *Idempotency {
	return &Idempotency{db: db, now: now, wait: wait, callerBytes: DefaultCallerBytes}
}

// DefaultCallerBytes is how many bytes of keys and outcomes one caller
// (an API key, a user) may store per window of 24 hours (IdempotencyTTL):
// 32 MiB: above 100,000 keys a day of batches stored whole (about 300
// bytes each with the row's own), 2,000 to 4,000 of batches with 50
// errors or more (an outcome keeps requestlog.MaxKeyedErrors errors, 8
// to 16 KiB). Since rows live 24 h, a caller holds at most twice this.
const DefaultCallerBytes = 32 << 20

// WithCallerBytes sets the bytes one caller may store per window; it
// returns s.
func (s *Idempotency) WithCallerBytes(n int64) *Idempotency {
	s.callerBytes = n
	return s
}

// rowBytes is what a claimed row is counted before its outcome: the key,
// the hash and the row's own overhead in Postgres.
func rowBytes(key string, hash []byte) int64 { return int64(len(key) + len(hash) + 100) }

// AbandonedClaim is how long a claim may wait for its outcome before
// another call with the key takes it over.
const AbandonedClaim = 2 * time.Minute

// Queries, by primary key or by the created_at index, so their generic
// plans use an index on an empty table too (idempotency_test.go). A row
// is finished when it has an outcome, or a status and answer (written by
// cfgd before outcomes, replayed until they expire).
const (
	claimKey = `INSERT INTO requestlog_idempotency (caller, key, body_hash, created_at) VALUES ($1, $2, $3, $4)
	ON CONFLICT (caller, key) DO NOTHING`
	readKey     = `SELECT body_hash, outcome, status, answer FROM requestlog_idempotency WHERE caller = $1 AND key = $2`
	dropExpired = `DELETE FROM requestlog_idempotency WHERE caller = $1 AND key = $2
	AND (created_at < $3 OR (status IS NULL AND outcome IS NULL AND created_at < $4))`
	// finishKey stores the outcome, and the REST answer the build before
	// outcomes reads ($5, $6: see legacyAnswer), and counts their bytes to
	// the caller.
	finishKey = `WITH f AS (UPDATE requestlog_idempotency SET outcome = $3, status = $5, answer = $6
	WHERE caller = $1 AND key = $2 AND status IS NULL AND outcome IS NULL RETURNING 1)
	UPDATE requestlog_idempotency_callers SET bytes = bytes + $4 WHERE caller = $1 AND EXISTS (SELECT 1 FROM f)`
	releaseKey = `DELETE FROM requestlog_idempotency WHERE caller = $1 AND key = $2 AND status IS NULL AND outcome IS NULL`
	// chargeCaller counts n ($3) bytes to a caller with room (its window,
	// since $2 at the latest, started over when older than $4): no row
	// when the caller has none left ($5).
	chargeCaller = `INSERT INTO requestlog_idempotency_callers AS c (caller, since, bytes) VALUES ($1, $2, $3)
	ON CONFLICT (caller) DO UPDATE SET
		since = CASE WHEN c.since <= $4 THEN $2 ELSE c.since END,
		bytes = CASE WHEN c.since <= $4 THEN $3 ELSE c.bytes + $3 END
	WHERE c.since <= $4 OR c.bytes < $5
	RETURNING bytes`
	readCaller = `SELECT since, bytes FROM requestlog_idempotency_callers WHERE caller = $1`
	holdsKey   = `SELECT EXISTS (SELECT 1 FROM requestlog_idempotency WHERE caller = $1 AND key = $2)`
	// The sweep looks at the oldest rows only, through the created_at
	// index (expired rows are always the oldest), in bounded steps: a
	// plain "created_at < $1" gets a sequential scan as its generic plan.
	sweepExpired = `DELETE FROM requestlog_idempotency WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM requestlog_idempotency ORDER BY created_at LIMIT 100)) AND created_at < $1`
	// The callers table has a row per caller that ever sent a key (API
	// keys and users): a scan of it once a minute is cheap.
	sweepCallers = `DELETE FROM requestlog_idempotency_callers WHERE since < $1`
)

// Room refuses a new key of a caller that stored its DefaultCallerBytes
// (or WithCallerBytes) within the current window: errcode RateLimited
// until the window ends. A key the caller holds passes: its call may be
// a replay, which stores nothing (Claim refuses it if it is not).
func (s *Idempotency) Room(ctx context.Context, caller, key string) error {
	err := s.room(ctx, caller)
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != errcode.RateLimited {
		return err
	}
	var held bool
	if qerr := s.db.QueryRow(ctx, holdsKey, caller, key).Scan(&held); qerr != nil {
		return fmt.Errorf("idempotency key: %w", qerr)
	}
	if held {
		return nil
	}
	return err
}

// room refuses a caller without room left.
func (s *Idempotency) room(ctx context.Context, caller string) error {
	var since time.Time
	var n int64
	err := s.db.QueryRow(ctx, readCaller, caller).Scan(&since, &n)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("idempotency key: %w", err)
	}
	return s.full(since, n)
}

// full is the refusal of a caller whose window since holds n bytes, or nil.
func (s *Idempotency) full(since time.Time, n int64) error {
	left := since.Add(IdempotencyTTL).Sub(s.now())
	if left <= 0 || n < s.callerBytes {
		return nil
	}
	return errcode.RetryLater(fmt.Sprintf("this caller stored %d bytes of idempotency keys and outcomes within 24 hours (at most %d): send without an Idempotency-Key, or retry later", n, s.callerBytes), left)
}

// Claim claims key for caller's call with body hash (requestlog.KeyStore).
func (s *Idempotency) Claim(ctx context.Context, caller, key string, hash []byte) (*requestlog.Outcome, error) {
	if err := requestlog.CheckKey(key); err != nil {
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
	deadline := time.Now().Add(s.wait)
	for {
		tag, err := s.db.Exec(ctx, claimKey, caller, key, hash, now)
		if err != nil {
			return nil, fmt.Errorf("idempotency key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return nil, s.charge(ctx, caller, key, hash, now)
		}
		var stored, outcome, answer []byte
		var status *int32
		err = s.db.QueryRow(ctx, readKey, caller, key).Scan(&stored, &outcome, &status, &answer)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // released or expired in between: claim again
		}
		if err != nil {
			return nil, fmt.Errorf("idempotency key: %w", err)
		}
		if subtle.ConstantTimeCompare(stored, hash) != 1 {
			return nil, errcode.New(errcode.Conflict, "this Idempotency-Key was used for another request body in the last 24 hours; use a new key")
		}
		switch {
		case outcome != nil:
			var out requestlog.Outcome
			if err := json.Unmarshal(outcome, &out); err != nil {
				return nil, fmt.Errorf("idempotency key: stored outcome: %w", err)
			}
			return &out, nil
		case status != nil:
			out, err := legacyOutcome(int(*status), answer)
			if err != nil {
				return nil, fmt.Errorf("idempotency key: stored answer: %w", err)
			}
			return &out, nil
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

// charge counts a new claim to its caller, or takes it back and refuses
// it when the caller has no room left.
func (s *Idempotency) charge(ctx context.Context, caller, key string, hash []byte, now time.Time) error {
	var n int64
	err := s.db.QueryRow(ctx, chargeCaller, caller, now, rowBytes(key, hash), now.Add(-IdempotencyTTL), s.callerBytes).Scan(&n)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("idempotency key: %w", err)
	} else if err = s.room(ctx, caller); err == nil {
		// The window ended in between: the next call starts a new one.
		err = &errcode.Error{Code: errcode.Conflict, Message: "retry shortly", RetryAfter: time.Second}
	}
	if rerr := s.Release(context.WithoutCancel(ctx), caller, key); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// Finish stores the outcome of the call that claimed key.
func (s *Idempotency) Finish(ctx context.Context, caller, key string, out requestlog.Outcome) error {
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("idempotency key: %w", err)
	}
	status, answer, err := legacyAnswer(out)
	if err != nil {
		return fmt.Errorf("idempotency key: %w", err)
	}
	if _, err := s.db.Exec(ctx, finishKey, caller, key, b, int64(len(b)+len(answer)), status, answer); err != nil {
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
	if _, err := s.db.Exec(ctx, sweepCallers, now.Add(-2*IdempotencyTTL)); err != nil {
		return
	}
	for range 100 {
		tag, err := s.db.Exec(ctx, sweepExpired, now.Add(-IdempotencyTTL))
		if err != nil || tag.RowsAffected() < 100 {
			return
		}
	}
}

// legacyAnswer is out as the build before outcomes stored a REST answer
// (status and JSON body), written beside the outcome for one release:
// during a rolling upgrade a replica of that build reads a finished call
// from it and answers a retry with it, instead of taking the row for a
// call still running (and, a minute on, for an abandoned one, running
// the retry again). That build's gRPC side reads only its own answers; a
// keyed Report retried there gets an error, never a second run. The next
// release stops writing it (docs/upgrading.md).
func legacyAnswer(out requestlog.Outcome) (int32, []byte, error) {
	var refusal *errcode.Error
	if errors.As(out.Err(), &refusal) {
		fields := make(map[string]string, len(out.Errors))
		for _, fe := range out.Errors {
			k := fmt.Sprintf("events[%d]", fe.Index)
			if fe.Field != "" {
				k += "." + fe.Field
			}
			fields[k] = fe.Message
		}
		b, merr := json.Marshal(struct {
			Success bool              `json:"success"`
			Error   string            `json:"error"`
			Code    string            `json:"code"`
			Fields  map[string]string `json:"fields,omitempty"`
		}{Error: refusal.Message, Code: string(refusal.Code), Fields: fields})
		return int32(refusal.Code.HTTPStatus()), b, merr
	}
	b, err := json.Marshal(struct {
		Success  bool                    `json:"success"`
		Accepted int                     `json:"accepted"`
		Rejected int                     `json:"rejected"`
		Errors   []requestlog.FieldError `json:"errors,omitempty"`
	}{out.Rejected == 0, out.Accepted, out.Rejected, out.Errors})
	return http.StatusAccepted, b, err
}

// legacyOutcome reads an answer stored before outcomes were (a
// transport's status and body), so a retry within its 24 h after an
// upgrade still gets it: the HTTP 202 body (requestlog.Outcome's fields
// and success), a 400 refusal (the HTTP error body, or gRPC's map of
// "events[i].field" to message), or gRPC's ReportResponse in protobuf
// (status 200). A refusal's rejected count was not stored: it is its
// number of problems, which is what is shown of it.
func legacyOutcome(status int, body []byte) (requestlog.Outcome, error) {
	var out requestlog.Outcome
	switch status {
	case http.StatusAccepted:
		err := json.Unmarshal(body, &out)
		return out, err
	case http.StatusOK:
		return legacyReport(body)
	case http.StatusBadRequest:
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil {
			return out, err
		}
		fields := map[string]string{}
		src := body // gRPC's: the map itself
		if _, rest := obj["code"]; rest {
			src = obj["fields"] // HTTP's: its error body
		}
		if len(src) > 0 {
			if err := json.Unmarshal(src, &fields); err != nil {
				return out, err
			}
		}
		for k, msg := range fields {
			fe, ok := parseField(k)
			if !ok {
				return out, fmt.Errorf("field %q", k)
			}
			fe.Message = msg
			out.Errors = append(out.Errors, fe)
		}
		slices.SortFunc(out.Errors, func(a, b requestlog.FieldError) int {
			return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Field, b.Field))
		})
		out.Rejected = max(len(out.Errors), 1)
		return out, nil
	}
	return out, fmt.Errorf("status %d", status)
}

// parseField reads "events[i]" or "events[i].field".
func parseField(k string) (requestlog.FieldError, bool) {
	rest, ok := strings.CutPrefix(k, "events[")
	if !ok {
		return requestlog.FieldError{}, false
	}
	num, field, ok := strings.Cut(rest, "]")
	i, err := strconv.Atoi(num)
	if !ok || err != nil || i < 0 || (field != "" && field[0] != '.') {
		return requestlog.FieldError{}, false
	}
	return requestlog.FieldError{Index: i, Field: strings.TrimPrefix(field, ".")}, true
}

// legacyReport reads cfgd.ingest.v1.ReportResponse (accepted = 1,
// rejected = 2, repeated FieldError errors = 3 {index = 1, field = 2,
// message = 3}) from the wire: the read model sits below the API and
// does not import its generated types.
func legacyReport(b []byte) (requestlog.Outcome, error) {
	var out requestlog.Outcome
	err := eachField(b, func(num protowire.Number, v uint64, sub []byte) error {
		switch num {
		case 1:
			out.Accepted = int(v)
		case 2:
			out.Rejected = int(v)
		case 3:
			var fe requestlog.FieldError
			if err := eachField(sub, func(num protowire.Number, v uint64, s []byte) error {
				switch num {
				case 1:
					fe.Index = int(v)
				case 2:
					fe.Field = string(s)
				case 3:
					fe.Message = string(s)
				}
				return nil
			}); err != nil {
				return err
			}
			out.Errors = append(out.Errors, fe)
		}
		return nil
	})
	return out, err
}

// eachField calls f with each field of a protobuf message: a varint's
// value, or a length-delimited field's bytes.
func eachField(b []byte, f func(protowire.Number, uint64, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v uint64
		var sub []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			sub, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, v, sub); err != nil {
			return err
		}
	}
	return nil
}
