package requestlogview_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// The store's queries keep to an index as generic plans on an empty
// table, as a connection prepares them on a young database and keeps them.
func TestIdempotencyQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := testenv.Postgres(t).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	for name, q := range requestlogview.IdempotencyQueries() {
		if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+q); err != nil {
			t.Fatal(err)
		}
		args := map[string]string{
			"read": "('c', 'k')", "drop": "('c', 'k', now(), now())", "finish": "('c', 'k', 'x', 1, 202, 'y')", "release": "('c', 'k')", "sweep": "(now())",
			"charge": "('c', now(), 1, now(), 10)", "caller": "('c')", "holds": "('c', 'k')",
		}[name]
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+args)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		if p := strings.Join(plan, "\n"); strings.Contains(p, "Seq Scan") || !strings.Contains(p, "Index") {
			t.Errorf("%s: generic plan without an index:\n%s", name, p)
		}
	}
}

func TestIdempotencyClaimFinishExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	at := time.Now().Add(-25 * time.Hour)
	old := requestlogview.NewIdempotency(pool, func() time.Time { return at }, 100*time.Millisecond)
	s := requestlogview.NewIdempotency(pool, time.Now, 100*time.Millisecond)
	if a, err := old.Claim(ctx, "key:1", "k", []byte("h1")); a != nil || err != nil {
		t.Fatalf("first claim: %v %v", a, err)
	}
	if err := old.Finish(ctx, "key:1", "k", requestlog.Outcome{Accepted: 1}); err != nil {
		t.Fatal(err)
	}
	// 25 hours later the key is free, for any body.
	if a, err := s.Claim(ctx, "key:1", "k", []byte("h2")); a != nil || err != nil {
		t.Fatalf("claim after expiry: %v %v", a, err)
	}
	// Still running: a copy waits, then is told it is in progress.
	var e *errcode.Error
	if _, err := s.Claim(ctx, "key:1", "k", []byte("h2")); !errors.As(err, &e) || e.Code != errcode.Conflict || e.RetryAfter == 0 {
		t.Fatalf("claim in progress: %v", err)
	}
	if err := s.Finish(ctx, "key:1", "k", requestlog.Outcome{Accepted: 2, Rejected: 1, Errors: []requestlog.FieldError{{Index: 1, Field: "status", Message: "bad"}}}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Claim(ctx, "key:1", "k", []byte("h2")); err != nil || a == nil || a.Accepted != 2 || len(a.Errors) != 1 || a.Errors[0].Message != "bad" {
		t.Fatalf("replay: %v %v", a, err)
	}
	// Keys are per caller; a released claim is free again.
	if a, err := s.Claim(ctx, "key:2", "k", []byte("h3")); a != nil || err != nil {
		t.Fatalf("other caller: %v %v", a, err)
	}
	if err := s.Release(ctx, "key:2", "k"); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Claim(ctx, "key:2", "k", []byte("h4")); a != nil || err != nil {
		t.Fatalf("after release: %v %v", a, err)
	}
	for _, bad := range []string{"", "has space", strings.Repeat("x", 256), "caf\xc3\xa9"} {
		if _, err := s.Claim(ctx, "key:1", bad, []byte("h")); !errors.As(err, &e) || e.Code != errcode.Invalid {
			t.Errorf("key %q: %v", bad, err)
		}
	}
}

// Issue 28 point 15: rows the code before outcomes stored (a transport's
// status and body) still replay after the upgrade, as the outcome each
// transport renders again; a row with an outcome is read as it is.
func TestIdempotencyReplaysAnswersStoredBeforeOutcomes(t *testing.T) {
	t.Parallel()
	// cfgd.ingest.v1.ReportResponse{accepted: 3, rejected: 1, errors: [{index: 2, field: "status", message: "bad"}]}
	fe := protowire.AppendTag(nil, 1, protowire.VarintType)
	fe = protowire.AppendVarint(fe, 2)
	fe = protowire.AppendTag(fe, 2, protowire.BytesType)
	fe = protowire.AppendString(fe, "status")
	fe = protowire.AppendTag(fe, 3, protowire.BytesType)
	fe = protowire.AppendString(fe, "bad")
	report := protowire.AppendTag(nil, 1, protowire.VarintType)
	report = protowire.AppendVarint(report, 3)
	report = protowire.AppendTag(report, 2, protowire.VarintType)
	report = protowire.AppendVarint(report, 1)
	report = protowire.AppendTag(report, 3, protowire.BytesType)
	report = protowire.AppendBytes(report, fe)
	bad := requestlog.FieldError{Index: 2, Field: "status", Message: "bad"}
	cases := []struct {
		name   string
		status int
		body   []byte
		want   requestlog.Outcome
	}{
		{"HTTP 202", 202, []byte(`{"success":false,"accepted":3,"rejected":1,"errors":[{"index":2,"field":"status","message":"bad"}]}`),
			requestlog.Outcome{Accepted: 3, Rejected: 1, Errors: []requestlog.FieldError{bad}}},
		{"HTTP 400", 400, []byte(`{"success":false,"error":"no event of the batch was accepted","code":"invalid","fields":{"events[2].status":"bad","events[0]":"not an object"}}`),
			requestlog.Outcome{Rejected: 2, Errors: []requestlog.FieldError{{Index: 0, Message: "not an object"}, bad}}},
		{"gRPC 400", 400, []byte(`{"events[2].status":"bad"}`), requestlog.Outcome{Rejected: 1, Errors: []requestlog.FieldError{bad}}},
		{"gRPC 200", 200, report, requestlog.Outcome{Accepted: 3, Rejected: 1, Errors: []requestlog.FieldError{bad}}},
	}
	ctx := context.Background()
	pool := testenv.Postgres(t)
	s := requestlogview.NewIdempotency(pool, time.Now, 100*time.Millisecond)
	for _, c := range cases {
		if _, err := pool.Exec(ctx, `INSERT INTO requestlog_idempotency (caller, key, body_hash, status, answer, created_at) VALUES ('key:9', $1, 'h', $2, $3, now() - interval '23 hours')`,
			strings.ReplaceAll(c.name, " ", "-"), c.status, c.body); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		got, err := s.Claim(ctx, "key:9", strings.ReplaceAll(c.name, " ", "-"), []byte("h"))
		if err != nil || got == nil || !reflect.DeepEqual(*got, c.want) {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
}

// Issue 28 point 6: one caller stores at most its bytes per 24 hours; past
// them a new key is refused (RateLimited, with the time the window ends),
// before the body is read (Room) and at the claim, while the keys it
// stored still replay and other callers are not affected.
func TestIdempotencyBoundsWhatOneCallerStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	s := requestlogview.NewIdempotency(pool, time.Now, 100*time.Millisecond).WithCallerBytes(4000)
	out := requestlog.Outcome{Accepted: 1, Rejected: 1, Errors: []requestlog.FieldError{{Index: 1, Field: "status", Message: strings.Repeat("m", 300)}}}
	var e *errcode.Error
	stored := 0
	for i := range 100 {
		key := fmt.Sprintf("k%d", i)
		if err := s.Room(ctx, "key:1", key); err != nil {
			if !errors.As(err, &e) || e.Code != errcode.RateLimited || e.RetryAfter < 23*time.Hour {
				t.Fatalf("room after %d keys: %v", stored, err)
			}
			// At the claim too (a call that passed Room before the
			// others filled the window).
			if _, err := s.Claim(ctx, "key:1", key, []byte("h")); !errors.As(err, &e) || e.Code != errcode.RateLimited {
				t.Fatalf("claim past the bound: %v", err)
			}
			break
		}
		if a, err := s.Claim(ctx, "key:1", key, []byte("h")); a != nil || err != nil {
			t.Fatalf("claim %s: %v %v", key, a, err)
		}
		if err := s.Finish(ctx, "key:1", key, out); err != nil {
			t.Fatal(err)
		}
		stored++
	}
	// Each key costs about 800 bytes here (its outcome, and the answer
	// the build before outcomes reads): 5 fit in 4000.
	if stored < 4 || stored > 6 {
		t.Fatalf("%d keys stored within 4000 bytes", stored)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM requestlog_idempotency WHERE caller = 'key:1'`).Scan(&rows); err != nil || rows != stored {
		t.Fatalf("%d rows (%v), want %d: the refused claim is not kept", rows, err, stored)
	}
	if err := s.Room(ctx, "key:1", "k0"); err != nil {
		t.Fatalf("a held key past the bound: %v", err)
	}
	if a, err := s.Claim(ctx, "key:1", "k0", []byte("h")); err != nil || a == nil || a.Accepted != 1 {
		t.Fatalf("replay past the bound: %v %v", a, err)
	}
	if a, err := s.Claim(ctx, "key:2", "k0", []byte("h")); a != nil || err != nil {
		t.Fatalf("another caller: %v %v", a, err)
	}
	// A day later the window starts over.
	later := requestlogview.NewIdempotency(pool, func() time.Time { return time.Now().Add(IdempotencyDay) }, 100*time.Millisecond).WithCallerBytes(2000)
	if err := later.Room(ctx, "key:1", "next-day"); err != nil {
		t.Fatalf("a day later: %v", err)
	}
	if a, err := later.Claim(ctx, "key:1", "next-day", []byte("h")); a != nil || err != nil {
		t.Fatalf("a day later: %v %v", a, err)
	}
}

// IdempotencyDay is a little more than the window.
const IdempotencyDay = requestlogview.IdempotencyTTL + time.Minute

// A finished call also keeps the REST answer of the build before outcomes,
// so a replica of that build still running in a rolling upgrade replays
// it to a retry (it reads status and answer, and would take a row without
// them for a call in progress, then for an abandoned one, and run the
// retry again).
func TestIdempotencyWritesTheAnswerThePreviousBuildReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	s := requestlogview.NewIdempotency(pool, time.Now, 100*time.Millisecond)
	bad := requestlog.FieldError{Index: 2, Field: "status", Message: "bad"}
	cases := []struct {
		key    string
		out    requestlog.Outcome
		status int
		body   string
	}{
		{"partly", requestlog.Outcome{Accepted: 3, Rejected: 1, Errors: []requestlog.FieldError{bad}}, 202,
			`{"success":false,"accepted":3,"rejected":1,"errors":[{"index":2,"field":"status","message":"bad"}]}`},
		{"whole", requestlog.Outcome{Accepted: 4}, 202, `{"success":true,"accepted":4,"rejected":0}`},
		{"refused", requestlog.Outcome{Rejected: 1, Errors: []requestlog.FieldError{bad}}, 400,
			`"code":"invalid","fields":{"events[2].status":"bad"}}`},
	}
	for _, c := range cases {
		if got, err := s.Claim(ctx, "key:7", c.key, []byte("h")); err != nil || got != nil {
			t.Fatalf("claim %s: %v %v", c.key, got, err)
		}
		if err := s.Finish(ctx, "key:7", c.key, c.out); err != nil {
			t.Fatal(err)
		}
		var status *int32
		var answer []byte
		if err := pool.QueryRow(ctx, `SELECT status, answer FROM requestlog_idempotency WHERE caller = 'key:7' AND key = $1`, c.key).Scan(&status, &answer); err != nil {
			t.Fatal(err)
		}
		if status == nil || int(*status) != c.status || !strings.HasSuffix(string(answer), c.body) {
			t.Errorf("%s: the previous build reads status %v, answer %s; want %d, …%s", c.key, status, answer, c.status, c.body)
		}
		// This build still reads the outcome itself.
		if got, err := s.Claim(ctx, "key:7", c.key, []byte("h")); err != nil && c.status == 202 || got == nil || !reflect.DeepEqual(*got, c.out) {
			t.Errorf("%s: replayed %+v, %v; want %+v", c.key, got, err, c.out)
		}
	}
}

// A keyed call whose events Kafka may still store holds its claim in the
// background for at most requestlog.SettleWithin after its produce timed
// out (1 s by default), then writes its outcome (10 s at most): the
// store must not take the claim for abandoned before (chaos finding 2).
func TestAbandonedClaimOutlivesASettlingCall(t *testing.T) {
	if d := time.Second + requestlog.SettleWithin + 10*time.Second; d >= requestlogview.AbandonedClaim {
		t.Fatalf("a settling call holds its claim up to %v, the store frees it after %v", d, requestlogview.AbandonedClaim)
	}
}
