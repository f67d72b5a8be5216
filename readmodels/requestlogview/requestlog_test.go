package requestlogview_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

type row struct {
	at       time.Time
	service  string
	method   string
	status   string
	duration uint32
}

// seed inserts rows into the raw table of a fresh database, as the sink
// does; the materialized views fill the rollups.
func seed(t *testing.T, rows ...row) driver.Conn {
	t.Helper()
	ctx := context.Background()
	_, conn := testenv.ClickHouse(t)
	if err := requestlogview.CreateTables(ctx, conn, requestlogview.LiveTables()); err != nil {
		t.Fatal(err)
	}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO requestlog_raw (id, created_at, created_ms, request_id, service_name, method_name, status, grpc_status_code, duration_ms, client_ip, user_id, username, is_authenticated, api_key_id, api_key_name, error_message)")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		code := map[string]string{"success": "OK", "timeout": "DeadlineExceeded", "cancelled": "Canceled", "error": "Internal"}[r.status]
		msg := ""
		if r.status == "error" {
			msg = "boom"
		}
		err := b.Append(uint64(i+1), r.at.Truncate(time.Second), uint16(r.at.Nanosecond()/1e6), "req-"+string(rune('a'+i%26)), r.service, r.method, r.status, code, r.duration,
			"10.0.0.1", uint64(7), "ann", uint8(1), uint64(3), "ci-key", msg)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	return conn
}

var now = time.Date(2026, 11, 23, 12, 34, 56, 0, time.UTC)

func clock() time.Time { return now }

func TestHoursWindowEdges(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse("15:04:05", s)
		if err != nil {
			t.Fatal(err)
		}
		return time.Date(2026, 11, 23, v.Hour(), v.Minute(), v.Second(), 0, time.UTC)
	}
	conn := seed(t,
		row{at("10:34:59"), "s", "m", "success", 1}, // outside 2h
		row{at("10:35:00"), "s", "m", "success", 1}, // first second of 2h (minute rollup)
		row{at("11:00:00"), "s", "m", "success", 1}, // hour rollup for 2h
		row{at("11:34:59"), "s", "m", "success", 1}, // outside 1h, inside 2h (hour rollup)
		row{at("11:35:00"), "s", "m", "success", 1}, // first second of 1h
		row{at("12:00:00"), "s", "m", "success", 1},
		row{at("12:34:59"), "s", "m", "success", 1},                // the current minute
		row{at("12:35:00"), "s", "m", "success", 1},                // the future
		row{now.Add(-30 * 24 * time.Hour), "s", "m", "success", 1}, // 4s before the 720h window
	)
	store := requestlogview.New(conn, clock, nil)
	for _, c := range []struct{ hours, want int }{{1, 3}, {2, 6}, {3, 7}, {24, 7}, {720, 7}, {721, 8}, {8760, 8}} {
		o, err := store.Overview(context.Background(), c.hours)
		if err != nil {
			t.Fatal(err)
		}
		if o.TotalRequests != int64(c.want) {
			t.Errorf("hours=%d: %d requests, want %d", c.hours, o.TotalRequests, c.want)
		}
	}
}

func TestStatisticsFields(t *testing.T) {
	t.Parallel()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	conn := seed(t,
		row{ago(time.Minute), "a.Svc", "Get", "success", 10},
		row{ago(2 * time.Hour), "a.Svc", "Get", "success", 30},
		row{ago(3 * time.Hour), "a.Svc", "Get", "error", 50},
		row{ago(5 * time.Hour), "a.Svc", "List", "timeout", 100},
		row{ago(6 * time.Hour), "a.Svc", "List", "pending", 0},
		row{ago(7 * time.Hour), "b.Svc", "Put", "cancelled", 7},
		row{ago(30 * time.Hour), "b.Svc", "Put", "success", 1000}, // outside 24h
	)
	store := requestlogview.New(conn, clock, func(context.Context) (int64, error) { return 4, nil })
	ctx := context.Background()
	o, err := store.Overview(ctx, 24)
	if err != nil {
		t.Fatal(err)
	}
	want := requestlogview.Overview{TotalRequests: 6, SuccessfulRequests: 2, FailedRequests: 3, SuccessRate: 2.0 / 6 * 100,
		AvgDurationMS: 197.0 / 6, TotalServices: 2, ActiveAPIKeys: 4}
	if !near(o.SuccessRate, want.SuccessRate) || !near(o.AvgDurationMS, want.AvgDurationMS) {
		t.Fatalf("overview = %+v, want %+v", o, want)
	}
	o.SuccessRate, o.AvgDurationMS = want.SuccessRate, want.AvgDurationMS
	if o != want {
		t.Fatalf("overview = %+v, want %+v", o, want)
	}

	svcs, err := store.Services(ctx, 24)
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 || svcs[0].ServiceName != "a.Svc" || svcs[1].ServiceName != "b.Svc" {
		t.Fatalf("services = %+v", svcs)
	}
	a := svcs[0]
	if a.TotalRequests != 5 || a.SuccessfulRequests != 2 || a.FailedRequests != 2 || a.MethodsCount != 2 ||
		!near(a.SuccessRate, 40) || !near(a.AvgDurationMS, 38) || a.P95DurationMS < 50 || a.P95DurationMS > 100 {
		t.Fatalf("a.Svc = %+v", a)
	}
	if b := svcs[1]; b.TotalRequests != 1 || b.FailedRequests != 1 || b.SuccessRate != 0 || b.MethodsCount != 1 || !near(b.AvgDurationMS, 7) {
		t.Fatalf("b.Svc = %+v", b)
	}

	ms, err := store.Methods(ctx, 24, "a.Svc")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("methods of a.Svc = %+v", ms)
	}
	get := ms[0]
	if get.MethodName != "Get" || get.TotalRequests != 3 || get.SuccessfulRequests != 2 || get.FailedRequests != 1 ||
		get.MinDurationMS != 10 || get.MaxDurationMS != 50 || !near(get.AvgDurationMS, 30) || !near(get.SuccessRate, 200.0/3) {
		t.Fatalf("Get = %+v", get)
	}
	all, err := store.Methods(ctx, 48, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[2].ServiceName != "b.Svc" || all[2].TotalRequests != 2 || all[2].MaxDurationMS != 1000 {
		t.Fatalf("all methods over 48h = %+v", all)
	}
	none, err := store.Methods(ctx, 24, "nope")
	if err != nil || len(none) != 0 {
		t.Fatalf("unknown service: %v, %v", none, err)
	}
}

func TestEmptyStatistics(t *testing.T) {
	t.Parallel()
	store := requestlogview.New(seed(t), clock, nil)
	o, err := store.Overview(context.Background(), 24)
	if err != nil {
		t.Fatal(err)
	}
	if o != (requestlogview.Overview{}) {
		t.Fatalf("empty overview = %+v", o)
	}
	s, err := store.Services(context.Background(), 24)
	if err != nil || s == nil || len(s) != 0 {
		t.Fatalf("empty services = %#v, %v", s, err)
	}
}

func TestRequests(t *testing.T) {
	t.Parallel()
	var rows []row
	for i := range 25 {
		status := "success"
		if i%5 == 0 {
			status = "error"
		}
		rows = append(rows, row{now.Add(-time.Duration(i) * time.Minute).Add(123 * time.Millisecond), "a.Svc", []string{"Get", "List"}[i%2], status, uint32(i)})
	}
	store := requestlogview.New(seed(t, rows...), clock, nil)
	ctx := context.Background()
	got, count, err := store.Requests(ctx, requestlogview.Filter{PageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if count != 25 || len(got) != 10 || got[0].DurationMS != 0 || got[9].DurationMS != 9 {
		t.Fatalf("page 1: count %d, %d rows, first %+v", count, len(got), got[0])
	}
	first := got[0]
	if !first.CreatedAt.Equal(now.Add(123*time.Millisecond)) || first.Status != "error" || first.GRPCStatusCode != "INTERNAL" ||
		first.ErrorMessage != "boom" || first.ClientIP != "10.0.0.1" || first.UserID != 7 || first.Username != "ann" ||
		!first.IsAuthenticated || first.APIKeyID != 3 || first.APIKeyName != "ci-key" || first.ID == 0 || first.RequestID == "" {
		t.Fatalf("fields = %+v", first)
	}
	got, _, err = store.Requests(ctx, requestlogview.Filter{Page: 3, PageSize: 10})
	if err != nil || len(got) != 5 {
		t.Fatalf("page 3: %d rows, %v", len(got), err)
	}
	got, count, err = store.Requests(ctx, requestlogview.Filter{Page: 9})
	if err != nil || len(got) != 0 || count != 25 {
		t.Fatalf("past the end: %d rows, count %d, %v", len(got), count, err)
	}
	got, count, err = store.Requests(ctx, requestlogview.Filter{Status: "error", Method: "Get", Service: "a.Svc"})
	if err != nil || count != 3 || len(got) != 3 { // i = 0, 10, 20
		t.Fatalf("filtered: %d rows, count %d, %v", len(got), count, err)
	}
	// Rows stored with Go's names (as cfgd once wrote them) are answered
	// and found by the canonical name, Go's name and the number.
	for _, sp := range []string{"INTERNAL", "Internal", "13"} {
		got, count, err = store.Requests(ctx, requestlogview.Filter{Code: sp})
		if err != nil || count != 5 || got[0].GRPCStatusCode != "INTERNAL" {
			t.Fatalf("code %s: %d rows, count %d, %v", sp, len(got), count, err)
		}
	}
	for _, bad := range []requestlogview.Filter{{Status: "weird"}, {Page: -1}, {PageSize: 1001}, {PageSize: -1}, {Code: "17"}, {Code: "internal"}} {
		var inv *errcode.Error
		if _, _, err := store.Requests(ctx, bad); !errors.As(err, &inv) || inv.Code != errcode.Invalid {
			t.Errorf("filter %+v: err = %v, want a field error", bad, err)
		}
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want int
		bad  bool
	}{{"", 24, false}, {"1", 1, false}, {"8760", 8760, false}, {"0", 0, true}, {"8761", 0, true}, {"-1", 0, true}, {"abc", 0, true}, {"1.5", 0, true}, {" 2", 0, true}} {
		got, err := requestlogview.ParseHours(c.raw)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseHours(%q) = %d, %v", c.raw, got, err)
		}
	}
	for _, c := range []struct {
		page, size string
		p, s       int
		bad        bool
	}{{"", "", 1, 100, false}, {"2", "1000", 2, 1000, false}, {"", "0", 0, 0, true}, {"", "1001", 0, 0, true}, {"", "-1", 0, 0, true}, {"", "abc", 0, 0, true}, {"0", "", 0, 0, true}, {"x", "", 0, 0, true}} {
		p, s, err := requestlogview.ParsePage(c.page, c.size)
		if (err != nil) != c.bad || (!c.bad && (p != c.p || s != c.s)) {
			t.Errorf("ParsePage(%q, %q) = %d, %d, %v", c.page, c.size, p, s, err)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// A p95 above the histogram's last bound (60 s) is the real 95th
// percentile, read from the raw rows of the window, not the maximum; the
// window is the same in UTC whatever zone the clock reports in.
func TestP95AboveTheLastBound(t *testing.T) {
	t.Parallel()
	var rows []row
	at := func(i int) time.Time { return now.Add(-time.Duration(i) * 29 * time.Minute) }
	for i := range 90 {
		rows = append(rows, row{at(i), "slow.Svc", "Stream", "success", 100})
	}
	for i, d := range []uint32{61000, 70000, 80000, 90000, 120000, 150000, 180000, 200000, 220000, 250000} {
		rows = append(rows, row{at(90 + i), "slow.Svc", "Stream", "success", d})
	}
	for i := range 20 {
		rows = append(rows, row{at(i), "slow.Svc", "Other", "success", 1000})
	}
	// Outside the 72-hour window: a longer request that must not count.
	rows = append(rows, row{now.Add(-100 * time.Hour), "slow.Svc", "Stream", "success", 500000})
	conn := seed(t, rows...)
	for _, zone := range []*time.Location{time.UTC, time.FixedZone("IST", 5*3600+1800), time.FixedZone("HST", -10*3600)} {
		t.Run(zone.String(), func(t *testing.T) {
			store := requestlogview.New(conn, func() time.Time { return now.In(zone) }, nil)
			ctx := context.Background()
			// The service: 120 requests, the 114th shortest is the 7th
			// longest of those above 60 s.
			svcs, err := store.Services(ctx, 72)
			if err != nil {
				t.Fatal(err)
			}
			if len(svcs) != 1 || svcs[0].TotalRequests != 120 || svcs[0].P95DurationMS != 90000 {
				t.Fatalf("services = %+v, want p95 90000 of 120 requests", svcs)
			}
			ms, err := store.Methods(ctx, 72, "slow.Svc")
			if err != nil {
				t.Fatal(err)
			}
			// Stream: 100 requests, the 95th shortest; Other stays inside
			// the histogram (clamped to its 1000 ms).
			if len(ms) != 2 || ms[0].MethodName != "Stream" || ms[0].P95DurationMS != 120000 || ms[0].MaxDurationMS != 250000 ||
				ms[1].MethodName != "Other" || ms[1].P95DurationMS != 1000 {
				t.Fatalf("methods = %+v, want Stream p95 120000 (max 250000), Other 1000", ms)
			}
			// The timeline's hours are UTC hours, whatever the clock's zone.
			tl, err := store.Timeline(ctx, 48, "slow.Svc")
			if err != nil {
				t.Fatal(err)
			}
			var requests int64
			for _, p := range tl.Points {
				requests += p.Requests
				if p.Time.Location() != time.UTC || p.Time.Unix()%3600 != 0 {
					t.Fatalf("timeline point at %v: want whole UTC hours", p.Time)
				}
			}
			if want := int64(119); requests != want { // from 13:00 two days back: all but the oldest (12:43:56)
				t.Fatalf("timeline over 48 hours: %d requests, want %d", requests, want)
			}
			// Over a year the request outside the 72 hours counts.
			svcs, err = store.Services(ctx, 8760)
			if err != nil || len(svcs) != 1 || svcs[0].P95DurationMS != 120000 {
				t.Fatalf("services over a year = %+v, %v, want p95 120000", svcs, err)
			}
		})
	}
}

// Issue #21 point 7: a row stored when ids held the partition at bit 52
// is answered with an id under 2^53, the one its place in Kafka has now.
func TestRequestIDsOfOldRowsFitInAJSONNumber(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := testenv.ClickHouse(t)
	if err := requestlogview.CreateTables(ctx, conn, requestlogview.LiveTables()); err != nil {
		t.Fatal(err)
	}
	old := uint64(2)<<52 | uint64(5)<<12 | 3
	b, err := conn.PrepareBatch(ctx, "INSERT INTO requestlog_raw (id, kafka_partition, kafka_offset, created_at, service_name, method_name, status)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(old, uint16(2), uint64(5), now.Truncate(time.Second), "s", "m", "success"); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	got, _, err := requestlogview.New(conn, clock, nil).Requests(ctx, requestlogview.Filter{})
	if err != nil || len(got) != 1 {
		t.Fatalf("%v %v", got, err)
	}
	if want := uint64(2)<<48 | uint64(5)<<12 | 3; got[0].ID != want || got[0].ID > requestlog.MaxJSONInt {
		t.Fatalf("id %d, want %d", got[0].ID, want)
	}
}
