package requestlogview_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/errcode"
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
			"read": "('c', 'k')", "drop": "('c', 'k', now(), now())", "finish": "('c', 'k', 202, 'x')", "release": "('c', 'k')", "sweep": "(now())",
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
	if err := old.Finish(ctx, "key:1", "k", requestlogview.Answer{Status: 202, Body: []byte("first")}); err != nil {
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
	if err := s.Finish(ctx, "key:1", "k", requestlogview.Answer{Status: 202, Body: []byte("second")}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Claim(ctx, "key:1", "k", []byte("h2")); err != nil || a == nil || a.Status != 202 || string(a.Body) != "second" {
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
