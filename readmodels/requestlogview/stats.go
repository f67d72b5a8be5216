package requestlogview

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Overview is the answer of /api/grpc/monitor/overview/.
type Overview struct {
	TotalRequests      int64   `json:"total_requests"`
	SuccessfulRequests int64   `json:"successful_requests"`
	FailedRequests     int64   `json:"failed_requests"`
	SuccessRate        float64 `json:"success_rate"`
	AvgDurationMS      float64 `json:"avg_duration_ms"`
	TotalServices      int64   `json:"total_services"`
	ActiveAPIKeys      int64   `json:"active_api_keys"`
}

// Service is one row of /api/grpc/monitor/services/.
type Service struct {
	ServiceName        string  `json:"service_name"`
	TotalRequests      int64   `json:"total_requests"`
	SuccessfulRequests int64   `json:"successful_requests"`
	FailedRequests     int64   `json:"failed_requests"`
	SuccessRate        float64 `json:"success_rate"`
	AvgDurationMS      float64 `json:"avg_duration_ms"`
	MethodsCount       int64   `json:"methods_count"`
	P95DurationMS      float64 `json:"p95_duration_ms"`
}

// Method is one row of /api/grpc/monitor/methods/.
type Method struct {
	ServiceName        string  `json:"service_name"`
	MethodName         string  `json:"method_name"`
	TotalRequests      int64   `json:"total_requests"`
	SuccessfulRequests int64   `json:"successful_requests"`
	FailedRequests     int64   `json:"failed_requests"`
	SuccessRate        float64 `json:"success_rate"`
	AvgDurationMS      float64 `json:"avg_duration_ms"`
	MinDurationMS      int64   `json:"min_duration_ms"`
	MaxDurationMS      int64   `json:"max_duration_ms"`
	P95DurationMS      float64 `json:"p95_duration_ms"`
}

// span is a range [from, to) of unix seconds read from one rollup table.
type span struct {
	table    string
	from, to int64
}

// window returns the rollup spans covering the last hours hours in whole
// minutes: the current minute and the hours*60-1 before it. Whole days
// inside it are read from the day rollup, whole hours around them from the
// hour rollup and the ragged minute edges from the minute rollup, so a
// 720-hour question reads about 30+48 rows per method plus at most two
// hours of minutes.
func window(now time.Time, hours int) []span {
	end := now.UTC().Truncate(time.Minute).Add(time.Minute) // exclusive
	start := end.Add(-time.Duration(hours) * time.Hour)
	ceil := func(t time.Time, d time.Duration) time.Time {
		if c := t.Truncate(d); c.Before(t) {
			return c.Add(d)
		}
		return t
	}
	var out []span
	add := func(table string, from, to time.Time) {
		if from.Before(to) {
			out = append(out, span{table, from.Unix(), to.Unix()})
		}
	}
	hs, he := ceil(start, time.Hour), end.Truncate(time.Hour)
	if !hs.Before(he) {
		add(MinuteTable, start, end)
		return out
	}
	// UTC days: the rollups bucket by whole days since the epoch.
	ds, de := ceil(hs, 24*time.Hour), he.Truncate(24*time.Hour)
	if ds.Before(de) {
		add(HourTable, hs, ds)
		add(DayTable, ds, de)
		add(HourTable, de, he)
	} else {
		add(HourTable, hs, he)
	}
	add(MinuteTable, start, hs)
	add(MinuteTable, he, end)
	return out
}

// The rollup columns each statistic reads. A question costs about its
// columns times the parts it reads (a 720-hour window reads five or six
// weekly parts of the day rollup, each column a file of its own, and 30
// daily parts in tables from before week partitions), and ClickHouse 18.16
// reads every column a UNION ALL branch names, used or not: so each
// statistic names only its own.
var (
	countCols    = "requests, successes, errors, timeouts, cancellations, duration_sum"
	overviewCols = "service_name, " + countCols
	groupCols    = func() string {
		cols := "service_name, method_name, " + countCols + ", duration_min, duration_max"
		for _, b := range durationBounds {
			cols += fmt.Sprintf(", duration_le_%d", b)
		}
		return cols
	}()
)

// rollupReadBuffer is the read buffer of each column a rollup read opens
// (max_read_buffer_size). ClickHouse 18.16 gives every column of every
// part it reads a buffer of that size, 1 MiB by default, however little it
// reads there: a 720-hour services question (27 columns, a few parts of
// each rollup) allocated 160 MB to read 18 MB, and took half again as long
// as with 64 KiB buffers (docs/benchmarks.md). A rollup read takes a few
// granules of each column, tens of KiB.
const rollupReadBuffer = 64 << 10

// rollupRead is ctx for a query of the rollups: small read buffers. It
// replaces any ClickHouse settings ctx carries (none on the read path).
func rollupRead(ctx context.Context) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_read_buffer_size": rollupReadBuffer}))
}

// histogram is the SQL of the cumulative duration counts, as one array.
var histogram = func() string {
	var parts []string
	for _, b := range durationBounds {
		parts = append(parts, fmt.Sprintf("countIfMerge(duration_le_%d)", b))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}()

// source is a subquery of the rollup columns cols inside the window, with
// its arguments; service, when not empty, narrows it to one service.
func source(spans []span, cols, service string) (string, []any) {
	var parts []string
	var args []any
	for _, sp := range spans {
		q := "SELECT " + cols + " FROM " + sp.table + " WHERE bucket >= toDateTime(?) AND bucket < toDateTime(?)"
		args = append(args, sp.from, sp.to)
		if service != "" {
			q += " AND service_name = ?"
			args = append(args, service)
		}
		parts = append(parts, q)
	}
	return "(" + strings.Join(parts, " UNION ALL ") + ")", args
}

// percentile reads the p-th percentile (0..1) from cumulative counts at
// durationBounds, interpolating inside the bucket and clamping to
// the observed min and max.
func percentile(p float64, total uint64, cum []uint64, lo, hi float64) float64 {
	if total == 0 {
		return 0
	}
	target := math.Ceil(p * float64(total))
	prevBound, prevCount := 0.0, 0.0
	v := hi
	for i, b := range durationBounds {
		c := float64(cum[i])
		if c >= target {
			v = prevBound + (float64(b)-prevBound)*(target-prevCount)/(c-prevCount)
			break
		}
		prevBound, prevCount = float64(b), c
	}
	return math.Min(math.Max(v, lo), hi)
}

// tailRank says whether the p-th percentile of total requests lies above
// the histogram's last bound (where the buckets say nothing about it) and
// if so its rank from the longest request down (1 is the longest).
func tailRank(p float64, total uint64, cum []uint64) (uint64, bool) {
	if total == 0 || len(cum) == 0 {
		return 0, false
	}
	target := uint64(math.Ceil(p * float64(total)))
	if cum[len(cum)-1] >= target {
		return 0, false
	}
	return total - target + 1, true
}

// tail is a percentile the histogram cannot tell: its group and its rank
// from the longest request down.
type tail struct {
	service, method string // method empty: the whole service
	rank            uint64
	at              int      // the row of the answer it belongs to
	p95             *float64 // that row's p95, set once the rows are read
}

// resolveTails reads each tail's percentile from the raw rows of the
// window spans covers that took longer than the last bound: exact, and
// cheap, since only the rank longest of those are sorted. A group whose
// raw rows are gone (retention) keeps the value the histogram gave.
func (s *Store) resolveTails(ctx context.Context, spans []span, tails []tail) error {
	if len(tails) == 0 {
		return nil
	}
	from, to := spans[0].from, spans[0].to
	for _, sp := range spans {
		from, to = min(from, sp.from), max(to, sp.to)
	}
	for _, t := range tails {
		q := "SELECT duration_ms FROM " + RawTable + " WHERE created_at >= toDateTime(?) AND created_at < toDateTime(?) AND duration_ms > ? AND service_name = ?"
		args := []any{from, to, durationBounds[len(durationBounds)-1], t.service}
		if t.method != "" {
			q += " AND method_name = ?"
			args = append(args, t.method)
		}
		q += " ORDER BY duration_ms DESC LIMIT " + strconv.FormatUint(t.rank-1, 10) + ", 1"
		var d uint32
		err := s.conn.QueryRow(ctx, q, args...).Scan(&d)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("p95 above %d ms: %w", durationBounds[len(durationBounds)-1], err)
		}
		*t.p95 = float64(d)
	}
	return nil
}

const aggregates = `countMerge(requests) AS total, countIfMerge(successes) AS ok,
	countIfMerge(errors) + countIfMerge(timeouts) + countIfMerge(cancellations) AS failed,
	sumMerge(duration_sum) AS duration`

// extremes are the shortest and the longest duration.
const extremes = "minMerge(duration_min), maxMerge(duration_max)"

type totals struct {
	total, ok, failed, duration uint64
}

func (t totals) rate() float64 {
	if t.total == 0 {
		return 0
	}
	return float64(t.ok) / float64(t.total) * 100
}

func (t totals) avg() float64 {
	if t.total == 0 {
		return 0
	}
	return float64(t.duration) / float64(t.total)
}

// Overview answers over the last hours hours.
func (s *Store) Overview(ctx context.Context, hours int) (Overview, error) {
	return retry(ctx, func() (Overview, error) { return s.overviewAttempt(ctx, hours) })
}

func (s *Store) overviewAttempt(ctx context.Context, hours int) (Overview, error) {
	if _, err := parseInt("hours", fmt.Sprint(hours), 1, MaxHours); err != nil {
		return Overview{}, err
	}
	src, args := source(window(s.now(), hours), overviewCols, "")
	var t totals
	var services uint64
	err := s.conn.QueryRow(rollupRead(ctx), "SELECT "+aggregates+", uniqExact(service_name) FROM "+src, args...).
		Scan(&t.total, &t.ok, &t.failed, &t.duration, &services)
	if err != nil {
		return Overview{}, fmt.Errorf("overview: %w", err)
	}
	o := Overview{TotalRequests: int64(t.total), SuccessfulRequests: int64(t.ok), FailedRequests: int64(t.failed),
		SuccessRate: t.rate(), AvgDurationMS: t.avg(), TotalServices: int64(services)}
	if s.activeKeys != nil {
		if o.ActiveAPIKeys, err = s.activeKeys(ctx); err != nil {
			return Overview{}, fmt.Errorf("active api keys: %w", err)
		}
	}
	return o, nil
}

// Services answers per service over the last hours hours, busiest first.
func (s *Store) Services(ctx context.Context, hours int) ([]Service, error) {
	return retry(ctx, func() ([]Service, error) { return s.servicesAttempt(ctx, hours) })
}

func (s *Store) servicesAttempt(ctx context.Context, hours int) ([]Service, error) {
	if _, err := parseInt("hours", fmt.Sprint(hours), 1, MaxHours); err != nil {
		return nil, err
	}
	spans := window(s.now(), hours)
	src, args := source(spans, groupCols, "")
	rows, err := s.conn.Query(rollupRead(ctx), "SELECT service_name, "+aggregates+", uniqExact(method_name), "+extremes+", "+histogram+
		" FROM "+src+" GROUP BY service_name ORDER BY total DESC, service_name", args...)
	if err != nil {
		return nil, fmt.Errorf("services: %w", err)
	}
	defer rows.Close()
	out := []Service{}
	var tails []tail
	for rows.Next() {
		var r Service
		var t totals
		var methods uint64
		var lo, hi uint32
		var cum []uint64
		if err := rows.Scan(&r.ServiceName, &t.total, &t.ok, &t.failed, &t.duration, &methods, &lo, &hi, &cum); err != nil {
			return nil, fmt.Errorf("services: %w", err)
		}
		r.TotalRequests, r.SuccessfulRequests, r.FailedRequests = int64(t.total), int64(t.ok), int64(t.failed)
		r.SuccessRate, r.AvgDurationMS, r.MethodsCount = t.rate(), t.avg(), int64(methods)
		r.P95DurationMS = percentile(0.95, t.total, cum, float64(lo), float64(hi))
		if rank, ok := tailRank(0.95, t.total, cum); ok {
			tails = append(tails, tail{service: r.ServiceName, rank: rank, at: len(out)})
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("services: %w", err)
	}
	rows.Close()
	for i := range tails {
		tails[i].p95 = &out[tails[i].at].P95DurationMS
	}
	if err := s.resolveTails(ctx, spans, tails); err != nil {
		return nil, fmt.Errorf("services: %w", err)
	}
	return out, nil
}

// Methods answers per method over the last hours hours, optionally of one
// service only, busiest first.
func (s *Store) Methods(ctx context.Context, hours int, service string) ([]Method, error) {
	return retry(ctx, func() ([]Method, error) { return s.methodsAttempt(ctx, hours, service) })
}

func (s *Store) methodsAttempt(ctx context.Context, hours int, service string) ([]Method, error) {
	if _, err := parseInt("hours", fmt.Sprint(hours), 1, MaxHours); err != nil {
		return nil, err
	}
	spans := window(s.now(), hours)
	src, args := source(spans, groupCols, service)
	rows, err := s.conn.Query(rollupRead(ctx), "SELECT service_name, method_name, "+aggregates+", "+extremes+", "+histogram+
		" FROM "+src+" GROUP BY service_name, method_name ORDER BY total DESC, service_name, method_name", args...)
	if err != nil {
		return nil, fmt.Errorf("methods: %w", err)
	}
	defer rows.Close()
	out := []Method{}
	var tails []tail
	for rows.Next() {
		var r Method
		var t totals
		var lo, hi uint32
		var cum []uint64
		if err := rows.Scan(&r.ServiceName, &r.MethodName, &t.total, &t.ok, &t.failed, &t.duration, &lo, &hi, &cum); err != nil {
			return nil, fmt.Errorf("methods: %w", err)
		}
		r.TotalRequests, r.SuccessfulRequests, r.FailedRequests = int64(t.total), int64(t.ok), int64(t.failed)
		r.SuccessRate, r.AvgDurationMS, r.MinDurationMS, r.MaxDurationMS = t.rate(), t.avg(), int64(lo), int64(hi)
		r.P95DurationMS = percentile(0.95, t.total, cum, float64(lo), float64(hi))
		if rank, ok := tailRank(0.95, t.total, cum); ok {
			tails = append(tails, tail{service: r.ServiceName, method: r.MethodName, rank: rank, at: len(out)})
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("methods: %w", err)
	}
	rows.Close()
	for i := range tails {
		tails[i].p95 = &out[tails[i].at].P95DurationMS
	}
	if err := s.resolveTails(ctx, spans, tails); err != nil {
		return nil, fmt.Errorf("methods: %w", err)
	}
	return out, nil
}
