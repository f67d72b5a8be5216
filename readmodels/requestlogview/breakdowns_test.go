package requestlogview_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// call is one raw row with its caller and code.
type call struct {
	at       time.Time
	service  string
	status   string
	code     string
	duration uint32
	userID   uint64
	username string
	keyID    uint64
	keyName  string
	// reportedBy is who posted the row (reported_by), '' as in rows
	// stored before it was recorded.
	reportedBy string
}

// seedCalls inserts calls into the raw table of a fresh database, ids
// 0..n-1 in order (the sink's first id is 0); the materialized views fill the rollups.
func seedCalls(t *testing.T, calls []call) driver.Conn {
	t.Helper()
	ctx := context.Background()
	_, conn := testenv.ClickHouse(t)
	if err := requestlogview.CreateTables(ctx, conn, requestlogview.LiveTables()); err != nil {
		t.Fatal(err)
	}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO requestlog_raw (id, created_at, created_ms, request_id, service_name, method_name, status, grpc_status_code, duration_ms, client_ip, user_id, username, is_authenticated, api_key_id, api_key_name, error_message, reported_by)")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		auth := uint8(0)
		if c.userID != 0 || c.keyID != 0 {
			auth = 1
		}
		if err := b.Append(uint64(i), c.at.Truncate(time.Second), uint16(c.at.Nanosecond()/1e6), fmt.Sprintf("req-%d", i+1), c.service, "M", c.status, c.code,
			c.duration, "10.0.0.1", c.userID, c.username, auth, c.keyID, c.keyName, "", c.reportedBy); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	return conn
}

const health = "grpc.health.v1.Health"

// randomCalls are n calls over the last 30 hours, half in the last
// hour (and a few in the future) of an outside service and cfgd's health service.
func randomCalls(r *rand.Rand, n int) []call {
	statuses := []struct{ status, code string }{{"success", "OK"}, {"error", "Internal"}, {"timeout", "DeadlineExceeded"}, {"cancelled", "Canceled"}, {"error", "NotFound"}}
	out := make([]call, n)
	for i := range out {
		st := statuses[r.IntN(len(statuses))]
		if r.IntN(2) == 0 {
			st = statuses[0]
		}
		c := call{at: now.Add(-time.Duration(r.Int64N(int64(30*time.Hour))) + 2*time.Minute), service: "shop.Orders", status: st.status, code: st.code,
			duration: uint32(r.ExpFloat64() * 300)}
		if r.IntN(2) == 0 { // a busy last hour: minutes of many requests
			c.at = now.Add(-time.Duration(r.Int64N(int64(time.Hour))) + time.Minute)
		}
		if r.IntN(4) == 0 {
			c.service = health
		}
		// Reporters: one key, another, a staff user, cfgd itself, and none
		// (rows from before reporters were recorded), each claiming any
		// caller below.
		c.reportedBy = []string{requestlog.ReportedByKey(1), requestlog.ReportedByKey(2), requestlog.ReportedByUser(1), requestlog.ReportedBySelf, ""}[r.IntN(5)]
		switch r.IntN(3) {
		case 0:
			c.keyID, c.keyName, c.userID, c.username = uint64(1+r.IntN(3)), "", uint64(1+r.IntN(2)), "u"
			c.keyName = fmt.Sprintf("key-%d", c.keyID)
			c.username = fmt.Sprintf("user-%d", c.userID)
		case 1:
			c.userID = uint64(1 + r.IntN(2))
			c.username = fmt.Sprintf("user-%d", c.userID)
		}
		out[i] = c
	}
	return out
}

// The latency series is what the raw rows of each bucket give: the same
// counts and the percentiles of the same histogram, each inside the
// histogram bucket holding the exact (nearest-rank) percentile of the raw
// durations.
func TestLatencyMatchesRawSQL(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(22, 6))
	conn := seedCalls(t, randomCalls(r, 3000))
	store := requestlogview.New(conn, clock, nil)
	ctx := context.Background()
	bounds := requestlogview.DurationBounds()
	var hist []string
	for _, b := range bounds {
		hist = append(hist, fmt.Sprintf("countIf(duration_ms <= %d)", b))
	}
	for _, tc := range []struct {
		hours           int
		service         string
		includeInternal bool
	}{{1, "", false}, {1, "", true}, {24, "", false}, {24, health, true}, {48, "", false}, {48, "", true}} {
		t.Run(fmt.Sprintf("%dh %s internal=%v", tc.hours, tc.service, tc.includeInternal), func(t *testing.T) {
			got, err := store.Latency(ctx, requestlogview.SeriesFilter{Hours: tc.hours, Service: tc.service, IncludeInternal: tc.includeInternal})
			if err != nil {
				t.Fatal(err)
			}
			step := int64(60)
			if tc.hours > 24 {
				step = 3600
			}
			if got.StepSeconds != int(step) || len(got.Points) != tc.hours*3600/int(step) {
				t.Fatalf("step %d, %d points", got.StepSeconds, len(got.Points))
			}
			q := fmt.Sprintf(`SELECT toUInt32(intDiv(toUInt32(created_at), %d) * %d) AS t, count(), countIf(status IN ('error', 'timeout', 'cancelled')),
				min(duration_ms), max(duration_ms), [%s], arraySort(groupArray(duration_ms))
				FROM requestlog_raw WHERE created_at >= toDateTime(?) AND created_at < toDateTime(?)`, step, step, strings.Join(hist, ", "))
			args := []any{got.Points[0].Time.Unix(), got.Points[len(got.Points)-1].Time.Unix() + step}
			if tc.service != "" {
				q, args = q+" AND service_name = ?", append(args, tc.service)
			}
			if !tc.includeInternal {
				q += " AND service_name NOT IN ('grpc.health.v1.Health', 'grpc.reflection.v1.ServerReflection', 'grpc.reflection.v1alpha.ServerReflection')"
			}
			rows, err := conn.Query(ctx, q+" GROUP BY t ORDER BY t", args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			want := map[int64]requestlogview.LatencyPoint{}
			exact := map[int64][]float64{}
			for rows.Next() {
				var at uint32
				var n, failed uint64
				var lo, hi uint32
				var cum []uint64
				var sorted []uint32
				if err := rows.Scan(&at, &n, &failed, &lo, &hi, &cum, &sorted); err != nil {
					t.Fatal(err)
				}
				p := func(q float64) *float64 {
					v := requestlogview.Percentile(q, n, cum, float64(lo), float64(hi))
					return &v
				}
				want[int64(at)] = requestlogview.LatencyPoint{Requests: int64(n), Failed: int64(failed), P50MS: p(0.5), P95MS: p(0.95), P99MS: p(0.99)}
				// The nearest-rank percentiles of the raw durations.
				for _, q := range []float64{0.5, 0.95, 0.99} {
					exact[int64(at)] = append(exact[int64(at)], float64(sorted[int(math.Ceil(q*float64(n)))-1]))
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			seen := 0
			for i, p := range got.Points {
				if p.Partial != (i == len(got.Points)-1) {
					t.Errorf("point %d partial %v", i, p.Partial)
				}
				w, ok := want[p.Time.Unix()]
				if !ok {
					if p.Requests != 0 || p.P50MS != nil || p.P95MS != nil || p.P99MS != nil {
						t.Errorf("empty bucket %v: %+v", p.Time, p)
					}
					continue
				}
				seen++
				if p.Requests != w.Requests || p.Failed != w.Failed || *p.P50MS != *w.P50MS || *p.P95MS != *w.P95MS || *p.P99MS != *w.P99MS {
					t.Errorf("bucket %v: %d/%d p50 %v p95 %v p99 %v, raw %d/%d %v %v %v", p.Time, p.Requests, p.Failed, *p.P50MS, *p.P95MS, *p.P99MS,
						w.Requests, w.Failed, *w.P50MS, *w.P95MS, *w.P99MS)
				}
				for j, v := range []float64{*p.P50MS, *p.P95MS, *p.P99MS} {
					if bucketOf(bounds, v) != bucketOf(bounds, exact[p.Time.Unix()][j]) {
						t.Errorf("bucket %v: percentile %d is %v, the exact one %v lies in another histogram bucket", p.Time, j, v, exact[p.Time.Unix()][j])
					}
				}
			}
			if seen != len(want) || seen == 0 {
				t.Fatalf("%d buckets with requests, raw SQL has %d", seen, len(want))
			}
		})
	}
	for _, h := range []int{0, 721} {
		var inv *errcode.Error
		if _, err := store.Latency(ctx, requestlogview.SeriesFilter{Hours: h}); !errors.As(err, &inv) || inv.Fields["hours"] == "" {
			t.Errorf("hours %d: %v", h, err)
		}
	}
}

// bucketOf is the index of the histogram bucket (lo, hi] holding v.
func bucketOf(bounds []int, v float64) int {
	i, _ := slices.BinarySearchFunc(bounds, v, func(b int, v float64) int {
		if float64(b) < v {
			return -1
		}
		return 1
	})
	return i
}

// The breakdowns count exactly the raw rows of the window, by caller and
// by status code, with and without cfgd's own traffic.
func TestBreakdownsCountTheWindow(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 22))
	calls := randomCalls(r, 2000)
	store := requestlogview.New(seedCalls(t, calls), clock, nil)
	ctx := context.Background()
	end := now.Truncate(time.Minute).Add(time.Minute)
	for _, tc := range []struct {
		hours           int
		service         string
		includeInternal bool
	}{{1, "", false}, {6, "", true}, {24, health, true}, {24, "", false}, {24, health, false}} {
		t.Run(fmt.Sprintf("%dh %s internal=%v", tc.hours, tc.service, tc.includeInternal), func(t *testing.T) {
			type key struct {
				reporter, kind string
				id             int64
				name           string
			}
			callers := map[key]*requestlogview.Caller{}
			codes := map[string]int64{}
			var total int64
			for _, c := range calls {
				at := c.at.Truncate(time.Second)
				if at.Before(end.Add(-time.Duration(tc.hours)*time.Hour)) || !at.Before(end) ||
					(tc.service != "" && c.service != tc.service) || (!tc.includeInternal && c.service == health) {
					continue
				}
				k := key{c.reportedBy, requestlogview.CallerAnonymous, 0, ""}
				switch {
				case c.keyID != 0:
					k.kind, k.id, k.name = requestlogview.CallerAPIKey, int64(c.keyID), c.keyName
				case c.userID != 0:
					k.kind, k.id, k.name = requestlogview.CallerUser, int64(c.userID), c.username
				}
				w := callers[k]
				if w == nil {
					w = &requestlogview.Caller{ReportedBy: k.reporter, ClaimedKind: k.kind, ClaimedID: k.id, ClaimedName: k.name}
					callers[k] = w
				}
				w.TotalRequests++
				if c.status == "success" {
					w.SuccessfulRequests++
				} else {
					w.FailedRequests++
				}
				// Answered by canonical name, whichever spelling was stored.
				codes[requestlog.CanonicalCode(c.code)]++
				total++
			}
			got, err := store.Callers(ctx, requestlogview.BreakdownFilter{Hours: tc.hours, Service: tc.service, IncludeInternal: tc.includeInternal, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(callers) {
				t.Fatalf("%d callers, want %d: %+v", len(got), len(callers), got)
			}
			for i, c := range got {
				w := callers[key{c.ReportedBy, c.ClaimedKind, c.ClaimedID, c.ClaimedName}]
				if w == nil || c.TotalRequests != w.TotalRequests || c.SuccessfulRequests != w.SuccessfulRequests || c.FailedRequests != w.FailedRequests {
					t.Errorf("caller %+v, want %+v", c, w)
				}
				if i > 0 && c.TotalRequests > got[i-1].TotalRequests {
					t.Errorf("caller %d busier than the one before", i)
				}
			}
			sc, err := store.StatusCodes(ctx, requestlogview.BreakdownFilter{Hours: tc.hours, Service: tc.service, IncludeInternal: tc.includeInternal})
			if err != nil {
				t.Fatal(err)
			}
			if len(sc) != len(codes) {
				t.Fatalf("%d codes, want %d", len(sc), len(codes))
			}
			for _, c := range sc {
				if c.Requests != codes[c.Code] || !near(c.Share, float64(codes[c.Code])/float64(total)*100) {
					t.Errorf("code %+v, want %d of %d", c, codes[c.Code], total)
				}
			}
		})
	}
	top, err := store.Callers(ctx, requestlogview.BreakdownFilter{Hours: 24, Limit: 2})
	if err != nil || len(top) != 2 {
		t.Fatalf("limit 2: %v, %v", top, err)
	}
	for _, f := range []requestlogview.BreakdownFilter{{Hours: 0}, {Hours: 8761}, {Hours: 1, Limit: 101}} {
		var inv *errcode.Error
		if _, err := store.Callers(ctx, f); !errors.As(err, &inv) || inv.Code != errcode.Invalid {
			t.Errorf("%+v: %v", f, err)
		}
	}
}

// A key's rows claiming another key's id and name, or a made-up one, are
// the reporting key's: rows are keyed by the reporter cfgd checked and the
// claim, so key B's own row counts only what B reported.
func TestCallersKeyRowsByTheirReporter(t *testing.T) {
	t.Parallel()
	a, b := requestlog.ReportedByKey(1), requestlog.ReportedByKey(2)
	at := now.Add(-10 * time.Minute)
	row := func(reporter string, keyID, userID uint64, name string) call {
		c := call{at: at, service: "shop.Orders", status: "success", code: "OK", duration: 5, keyID: keyID, userID: userID, reportedBy: reporter}
		if keyID != 0 {
			c.keyName = name
		} else {
			c.username = name
		}
		return c
	}
	calls := []call{
		row(b, 2, 0, "beta"), row(b, 2, 0, "beta"), row(b, 2, 0, "beta"), // B's own
		row(a, 2, 0, "beta"), row(a, 2, 0, "beta"), // A claiming to be B
		row(a, 2, 0, "root"),   // A claiming B's id under a made-up name
		row(a, 99, 0, "admin"), // A claiming a key that does not exist
		row(a, 0, 5, "ann"),    // A claiming a user
	}
	store := requestlogview.New(seedCalls(t, calls), clock, nil)
	got, err := store.Callers(context.Background(), requestlogview.BreakdownFilter{Hours: 1})
	if err != nil {
		t.Fatal(err)
	}
	type caller struct {
		reporter, kind string
		id             int64
		name           string
		total          int64
	}
	var rows []caller
	for _, c := range got {
		rows = append(rows, caller{c.ReportedBy, c.ClaimedKind, c.ClaimedID, c.ClaimedName, c.TotalRequests})
	}
	want := []caller{
		{b, requestlogview.CallerAPIKey, 2, "beta", 3},
		{a, requestlogview.CallerAPIKey, 2, "beta", 2},
		{a, requestlogview.CallerAPIKey, 2, "root", 1},
		{a, requestlogview.CallerAPIKey, 99, "admin", 1},
		{a, requestlogview.CallerUser, 5, "ann", 1},
	}
	if !slices.Equal(rows, want) {
		t.Fatalf("callers\n%+v\nwant\n%+v", rows, want)
	}
}

// The request list follows a window and hides cfgd's own traffic when
// asked; one request is found by its id.
func TestRequestsWindowInternalAndDetail(t *testing.T) {
	t.Parallel()
	calls := []call{
		{at: now.Add(-2 * time.Hour), service: "shop.Orders", status: "success", code: "OK", duration: 3},
		{at: now.Add(-30 * time.Minute), service: "shop.Orders", status: "error", code: "Internal", duration: 4, keyID: 9, keyName: "ci"},
		{at: now.Add(-20 * time.Minute), service: health, status: "success", code: "OK", duration: 1},
		{at: now.Add(-10 * time.Minute), service: "grpc.reflection.v1alpha.ServerReflection", status: "success", code: "OK", duration: 1},
	}
	store := requestlogview.New(seedCalls(t, calls), clock, nil)
	ctx := context.Background()
	id := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		f    requestlogview.Filter
		want []uint64
	}{
		{requestlogview.Filter{}, []uint64{3, 2, 1, 0}},
		{requestlogview.Filter{Hours: 1}, []uint64{3, 2, 1}},
		{requestlogview.Filter{Hours: 1, ExcludeInternal: true}, []uint64{1}},
		{requestlogview.Filter{ExcludeInternal: true}, []uint64{1, 0}},
		{requestlogview.Filter{ID: id(2)}, []uint64{2}},
		{requestlogview.Filter{ID: id(0)}, []uint64{0}},
	} {
		rs, n, err := store.Requests(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		if !slices.Equal(ids, tc.want) || n != int64(len(tc.want)) {
			t.Errorf("%+v: %v (%d), want %v", tc.f, ids, n, tc.want)
		}
	}
	if _, _, err := store.Requests(ctx, requestlogview.Filter{Hours: 8761}); err == nil {
		t.Error("hours 8761 accepted")
	}
	if r, err := store.Request(ctx, 0); err != nil || r.ID != 0 || r.DurationMS != 3 {
		t.Fatalf("request 0: %+v, %v", r, err)
	}
	r, err := store.Request(ctx, 1)
	if err != nil || r.ID != 1 || r.APIKeyName != "ci" || r.GRPCStatusCode != "INTERNAL" || r.DurationMS != 4 {
		t.Fatalf("request 1: %+v, %v", r, err)
	}
	var nf *errcode.Error
	if _, err := store.Request(ctx, 99); !errors.As(err, &nf) || nf.Code != errcode.NotFound {
		t.Fatalf("request 99: %v", err)
	}
	if got := requestlogview.InternalServices(); !slices.Contains(got, health) || !slices.Contains(got, "grpc.reflection.v1.ServerReflection") {
		t.Fatalf("internal services %v", got)
	}
}
