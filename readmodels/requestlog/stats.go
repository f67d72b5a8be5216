package requestlog

import (
	"context"
	"fmt"
	"time"

	"github.com/cfgd/cfgd/deploy/migrations"
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

// window is the set of rollup rows covering the last hours hours, in whole
// minutes: the current minute and the hours*60-1 before it. Whole hours
// inside it are read from the hour rollup, the edges from the minute
// rollup, so a 720-hour question reads about 720 rows per method.
type window struct {
	hourFrom, hourTo int64 // hour buckets in [hourFrom, hourTo)
	minuteRanges     [2][2]int64
}

func newWindow(now time.Time, hours int) window {
	end := now.UTC().Truncate(time.Minute).Add(time.Minute) // exclusive
	start := end.Add(-time.Duration(hours) * time.Hour)
	hs := start.Truncate(time.Hour)
	if hs.Before(start) {
		hs = hs.Add(time.Hour)
	}
	he := end.Truncate(time.Hour)
	if !hs.Before(he) {
		return window{minuteRanges: [2][2]int64{{start.Unix(), end.Unix()}, {0, 0}}}
	}
	return window{hourFrom: hs.Unix(), hourTo: he.Unix(),
		minuteRanges: [2][2]int64{{start.Unix(), hs.Unix()}, {he.Unix(), end.Unix()}}}
}

const stateCols = "service_name, method_name, requests, successes, errors, timeouts, cancellations, duration_sum, duration_min, duration_max, duration_q"

// source is a subquery of the rollup states inside w, with its arguments;
// extra narrows it further (a condition on service_name).
func (w window) source(extra string) (string, []any) {
	q := "SELECT " + stateCols + " FROM " + migrations.RequestLogHour + " WHERE bucket >= toDateTime(?) AND bucket < toDateTime(?)" + extra +
		" UNION ALL SELECT " + stateCols + " FROM " + migrations.RequestLogMinute +
		" WHERE ((bucket >= toDateTime(?) AND bucket < toDateTime(?)) OR (bucket >= toDateTime(?) AND bucket < toDateTime(?)))" + extra
	return "(" + q + ")", []any{w.hourFrom, w.hourTo, w.minuteRanges[0][0], w.minuteRanges[0][1], w.minuteRanges[1][0], w.minuteRanges[1][1]}
}

const aggregates = `countMerge(requests) AS total, countIfMerge(successes) AS ok,
	countIfMerge(errors) + countIfMerge(timeouts) + countIfMerge(cancellations) AS failed,
	sumMerge(duration_sum) AS duration`

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
	if _, err := parseInt("hours", fmt.Sprint(hours), 1, MaxHours); err != nil {
		return Overview{}, err
	}
	src, args := newWindow(s.now(), hours).source("")
	var t totals
	var services uint64
	err := s.conn.QueryRow(ctx, "SELECT "+aggregates+", uniqExact(service_name) FROM "+src, args...).
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
	if _, err := parseInt("hours", fmt.Sprint(hours), 1, MaxHours); err != nil {
		return nil, err
	}
	src, args := newWindow(s.now(), hours).source("")
	rows, err := s.conn.Query(ctx, "SELECT service_name, "+aggregates+`, uniqExact(method_name), toFloat64(quantileTDigestMerge(0.95)(duration_q))
FROM `+src+` GROUP BY service_name ORDER BY total DESC, service_name`, args...)
	if err != nil {
		return nil, fmt.Errorf("services: %w", err)
	}
	defer rows.Close()
	out := []Service{}
	for rows.Next() {
		var r Service
		var t totals
		var methods uint64
		var p95 float64
		if err := rows.Scan(&r.ServiceName, &t.total, &t.ok, &t.failed, &t.duration, &methods, &p95); err != nil {
			return nil, fmt.Errorf("services: %w", err)
		}
		r.TotalRequests, r.SuccessfulRequests, r.FailedRequests = int64(t.total), int64(t.ok), int64(t.failed)
		r.SuccessRate, r.AvgDurationMS, r.MethodsCount, r.P95DurationMS = t.rate(), t.avg(), int64(methods), p95
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("services: %w", err)
	}
	return out, nil
}

// Methods answers per method over the last hours hours, optionally of one
// service only, busiest first.
func (s *Store) Methods(ctx context.Context, hours int, service string) ([]Method, error) {
	if _, err := parseInt("hours", fmt.Sprint(hours), 1, MaxHours); err != nil {
		return nil, err
	}
	extra := ""
	if service != "" {
		extra = " AND service_name = ?"
	}
	w := newWindow(s.now(), hours)
	src, args := w.source(extra)
	if service != "" {
		// The placeholders come in the order of source's text.
		args = []any{args[0], args[1], service, args[2], args[3], args[4], args[5], service}
	}
	rows, err := s.conn.Query(ctx, "SELECT service_name, method_name, "+aggregates+`,
	minMerge(duration_min), maxMerge(duration_max), toFloat64(quantileTDigestMerge(0.95)(duration_q))
FROM `+src+` GROUP BY service_name, method_name ORDER BY total DESC, service_name, method_name`, args...)
	if err != nil {
		return nil, fmt.Errorf("methods: %w", err)
	}
	defer rows.Close()
	out := []Method{}
	for rows.Next() {
		var r Method
		var t totals
		var lo, hi uint32
		var p95 float64
		if err := rows.Scan(&r.ServiceName, &r.MethodName, &t.total, &t.ok, &t.failed, &t.duration, &lo, &hi, &p95); err != nil {
			return nil, fmt.Errorf("methods: %w", err)
		}
		r.TotalRequests, r.SuccessfulRequests, r.FailedRequests = int64(t.total), int64(t.ok), int64(t.failed)
		r.SuccessRate, r.AvgDurationMS, r.MinDurationMS, r.MaxDurationMS, r.P95DurationMS = t.rate(), t.avg(), int64(lo), int64(hi), p95
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("methods: %w", err)
	}
	return out, nil
}
