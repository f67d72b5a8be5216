package testenv

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/events/requestlog"
)

// RequestLogSpread makes n request-log events, the i-th at from + i*step,
// across services, methods, statuses and duration buckets, with every
// column filled; seq numbers them (request ids) across calls.
func RequestLogSpread(seq *atomic.Int64, n int, from time.Time, step time.Duration) []requestlog.Event {
	statuses := requestlog.Statuses()
	evs := make([]requestlog.Event, n)
	for i := range evs {
		k := int(seq.Add(1))
		st := statuses[k%len(statuses)]
		evs[i] = requestlog.Event{RequestID: fmt.Sprintf("r%d", k), ServiceName: fmt.Sprintf("svc.S%d", k%3), MethodName: fmt.Sprintf("M%d", k%4),
			Status: st, DurationMS: int64(k*37) % 70000, CreatedAt: from.Add(time.Duration(i) * step).UTC(),
			ErrorMessage: map[bool]string{true: "boom", false: ""}[st == requestlog.StatusError], ClientIP: "10.0.0.1",
			UserID: int64(k % 7), Username: fmt.Sprintf("u%d", k%7), IsAuthenticated: k%2 == 0, APIKeyID: int64(k % 5), APIKeyName: "key"}
	}
	return evs
}

// RequestLogCounts is what the request-log tables hold: raw rows, the
// minute and hour rollups' request counts, and distinct ids.
func RequestLogCounts(t testing.TB, conn driver.Conn) (raw, minute, hour, distinctIDs uint64) {
	t.Helper()
	ctx := context.Background()
	if err := conn.QueryRow(ctx, "SELECT count(), uniqExact(id) FROM requestlog_raw").Scan(&raw, &distinctIDs); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT countMerge(requests) FROM requestlog_minute").Scan(&minute); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT countMerge(requests) FROM requestlog_hour").Scan(&hour); err != nil {
		t.Fatal(err)
	}
	return raw, minute, hour, distinctIDs
}

// ExactRequestLogs waits (up to 60 s) until the request-log tables hold
// want rows, then checks that none shows up twice: raw rows, both rollups
// and distinct ids all equal want.
func ExactRequestLogs(t testing.TB, conn driver.Conn, want uint64) {
	t.Helper()
	var raw, minute, hour, ids uint64
	// The rollups are written just after the raw rows (materialized views).
	deadline := time.Now().Add(60 * time.Second)
	for {
		raw, minute, hour, ids = RequestLogCounts(t, conn)
		if raw >= want && minute >= want && hour >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d rows (raw %d, minute %d, hour %d)", want, raw, minute, hour)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // let a duplicate show, if any
	raw, minute, hour, ids = RequestLogCounts(t, conn)
	if raw != want || minute != want || hour != want || ids != want {
		t.Fatalf("raw %d, minute rollup %d, hour rollup %d, distinct ids %d; want %d each", raw, minute, hour, ids, want)
	}
}
