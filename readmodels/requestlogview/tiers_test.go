package requestlogview_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// Issue #22 point 7: whichever rollups a window is read from (minutes at
// its ragged edges, hours, whole days), the statistics are those of raw
// SQL over requestlog_raw for the same window: from the current minute's
// end back hours hours.
func TestStatisticsEqualRawSQLAtEveryWindow(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(22, 7))
	services := []string{"a.Svc", "b.Svc", "slow.Svc"}
	methods := []string{"Get", "List", "Stream"}
	statuses := []string{"success", "success", "success", "error", "timeout", "cancelled", "pending"}
	var rows []row
	for range 6000 {
		// Over 31 days and a few minutes into the future.
		at := now.Add(-31*24*time.Hour + time.Duration(r.Int64N(int64(31*24*time.Hour+5*time.Minute))))
		svc, m := services[r.IntN(len(services))], methods[r.IntN(len(methods))]
		d := uint32(r.ExpFloat64() * 40)
		if svc == "slow.Svc" && m == "Stream" && r.IntN(10) == 0 {
			d = 60000 + uint32(r.IntN(200000)) // the p95 lies above the histogram
		}
		rows = append(rows, row{at, svc, m, statuses[r.IntN(len(statuses))], d})
	}
	// Rows on the edges of the windows: the first and last second of each.
	end := now.Truncate(time.Minute).Add(time.Minute)
	for _, h := range []int{1, 24, 72, 720} {
		start := end.Add(-time.Duration(h) * time.Hour)
		for _, at := range []time.Time{start.Add(-time.Second), start, end.Add(-time.Second), end} {
			rows = append(rows, row{at, "a.Svc", "Get", "success", uint32(h)})
		}
	}
	conn := seed(t, rows...)
	store := requestlogview.New(conn, clock, nil)
	ctx := context.Background()
	for _, hours := range []int{1, 24, 72, 720} {
		t.Run(fmt.Sprintf("%dh", hours), func(t *testing.T) {
			from, to := end.Add(-time.Duration(hours)*time.Hour).Unix(), end.Unix()
			raw := rawStatistics(ctx, t, conn, from, to)

			o, err := store.Overview(ctx, hours)
			if err != nil {
				t.Fatal(err)
			}
			if want := raw.overview(); !reflect.DeepEqual(o, want) {
				t.Errorf("overview = %+v, raw SQL %+v", o, want)
			}
			svcs, err := store.Services(ctx, hours)
			if err != nil {
				t.Fatal(err)
			}
			if want := raw.services(); !reflect.DeepEqual(svcs, want) {
				t.Errorf("services = %+v,\nraw SQL %+v", svcs, want)
			}
			ms, err := store.Methods(ctx, hours, "")
			if err != nil {
				t.Fatal(err)
			}
			if want := raw.methods(""); !reflect.DeepEqual(ms, want) {
				t.Errorf("methods = %+v,\nraw SQL %+v", ms, want)
			}
			one, err := store.Methods(ctx, hours, "slow.Svc")
			if err != nil {
				t.Fatal(err)
			}
			if want := raw.methods("slow.Svc"); !reflect.DeepEqual(one, want) {
				t.Errorf("methods of slow.Svc = %+v,\nraw SQL %+v", one, want)
			}
		})
	}
}

// rawGroup is one service's or method's figures as raw SQL gives them.
type rawGroup struct {
	service, method              string
	total, ok, failed, sum, uniq uint64
	lo, hi                       uint32
	cum                          []uint64
	desc                         []uint32
}

type rawStats struct{ all, svcs, meths []rawGroup }

// rawStatistics reads the window [from, to) from requestlog_raw.
func rawStatistics(ctx context.Context, t *testing.T, conn driver.Conn, from, to int64) rawStats {
	t.Helper()
	var cum []string
	for _, b := range requestlogview.DurationBounds() {
		cum = append(cum, fmt.Sprintf("countIf(duration_ms <= %d)", b))
	}
	last := requestlogview.DurationBounds()[len(requestlogview.DurationBounds())-1]
	read := func(keys, uniq string) []rawGroup {
		q := "SELECT " + keys + `, count() AS total, countIf(status = 'success'), countIf(status IN ('error', 'timeout', 'cancelled')),
			sum(duration_ms), ` + uniq + `, min(duration_ms), max(duration_ms), [` + strings.Join(cum, ", ") + `],
			arrayReverseSort(groupArrayIf(duration_ms, duration_ms > ` + fmt.Sprint(last) + `))
			FROM requestlog_raw WHERE created_at >= toDateTime(?) AND created_at < toDateTime(?)
			GROUP BY ` + keys + ` ORDER BY total DESC, ` + keys
		rows, err := conn.Query(ctx, q, from, to)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []rawGroup
		for rows.Next() {
			var g rawGroup
			var k1, k2 string
			dest := []any{&k1, &k2}[:strings.Count(keys, ",")+1]
			dest = append(dest, &g.total, &g.ok, &g.failed, &g.sum, &g.uniq, &g.lo, &g.hi, &g.cum, &g.desc)
			if err := rows.Scan(dest...); err != nil {
				t.Fatal(err)
			}
			g.service, g.method = k1, k2
			out = append(out, g)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	return rawStats{
		all:   read("'' AS k", "uniqExact(service_name)"),
		svcs:  read("service_name", "uniqExact(method_name)"),
		meths: read("service_name, method_name", "toUInt64(1)"),
	}
}

func (g rawGroup) rate() float64 {
	if g.total == 0 {
		return 0
	}
	return float64(g.ok) / float64(g.total) * 100
}

func (g rawGroup) avg() float64 {
	if g.total == 0 {
		return 0
	}
	return float64(g.sum) / float64(g.total)
}

func (g rawGroup) p95() float64 {
	return requestlogview.P95(g.total, g.cum, float64(g.lo), float64(g.hi), g.desc)
}

func (s rawStats) overview() requestlogview.Overview {
	if len(s.all) == 0 {
		return requestlogview.Overview{}
	}
	g := s.all[0]
	return requestlogview.Overview{TotalRequests: int64(g.total), SuccessfulRequests: int64(g.ok), FailedRequests: int64(g.failed),
		SuccessRate: g.rate(), AvgDurationMS: g.avg(), TotalServices: int64(g.uniq)}
}

func (s rawStats) services() []requestlogview.Service {
	out := []requestlogview.Service{}
	for _, g := range s.svcs {
		out = append(out, requestlogview.Service{ServiceName: g.service, TotalRequests: int64(g.total), SuccessfulRequests: int64(g.ok),
			FailedRequests: int64(g.failed), SuccessRate: g.rate(), AvgDurationMS: g.avg(), MethodsCount: int64(g.uniq), P95DurationMS: g.p95()})
	}
	return out
}

func (s rawStats) methods(service string) []requestlogview.Method {
	out := []requestlogview.Method{}
	for _, g := range s.meths {
		if service != "" && g.service != service {
			continue
		}
		out = append(out, requestlogview.Method{ServiceName: g.service, MethodName: g.method, TotalRequests: int64(g.total),
			SuccessfulRequests: int64(g.ok), FailedRequests: int64(g.failed), SuccessRate: g.rate(), AvgDurationMS: g.avg(),
			MinDurationMS: int64(g.lo), MaxDurationMS: int64(g.hi), P95DurationMS: g.p95()})
	}
	return out
}
