package requestlogview

import (
	"context"
	"fmt"
	"time"
)

// LatencyPoint is one bucket of a latency series. The percentiles are read
// from the bucket's duration histogram as the statistics' p95 is, and are
// null for a bucket without requests: no requests is not 0 ms.
type LatencyPoint struct {
	Time      time.Time `json:"time"`
	Requests  int64     `json:"requests"`
	Failed    int64     `json:"failed"`
	ErrorRate float64   `json:"error_rate"`
	P50MS     *float64  `json:"p50_ms"`
	P95MS     *float64  `json:"p95_ms"`
	P99MS     *float64  `json:"p99_ms"`
	// Partial marks the current bucket, still filling: a chart draws it as
	// such, not as a drop.
	Partial bool `json:"partial"`
}

// Latency is the answer of /api/grpc/monitor/latency/: the timeline's
// buckets with their latency percentiles, over the same window.
type Latency struct {
	Hours           int            `json:"hours"`
	StepSeconds     int            `json:"step_seconds"`
	Service         string         `json:"service"`
	IncludeInternal bool           `json:"include_internal"`
	Points          []LatencyPoint `json:"points"`
}

// SeriesFilter chooses a series: the last Hours hours (1..MaxTimelineHours),
// optionally of one Service, with or without cfgd's own traffic.
type SeriesFilter struct {
	Hours           int
	Service         string
	IncludeInternal bool
}

// Latency returns the requests, failures and p50/p95/p99 duration per
// bucket over the last f.Hours hours, oldest first, one point per bucket,
// the current one (Partial) last. Buckets are those of Timeline: minutes up
// to a day, hours beyond, read from the matching rollup, never raw rows.
func (s *Store) Latency(ctx context.Context, f SeriesFilter) (Latency, error) {
	return retry(ctx, func() (Latency, error) { return s.latencyAttempt(ctx, f) })
}

func (s *Store) latencyAttempt(ctx context.Context, f SeriesFilter) (Latency, error) {
	if _, err := parseInt("hours", fmt.Sprint(f.Hours), 1, MaxTimelineHours); err != nil {
		return Latency{}, err
	}
	step, table := time.Minute, MinuteTable
	if f.Hours > minuteTimelineHours {
		step, table = time.Hour, HourTable
	}
	end := s.now().UTC().Truncate(step).Add(step)
	start := end.Add(-time.Duration(f.Hours) * time.Hour)
	q := latencyPoint + ", " + extremes + ", " + histogram + " FROM " + table + " WHERE bucket >= toDateTime(?) AND bucket < toDateTime(?)"
	args := []any{start.Unix(), end.Unix()}
	if f.Service != "" {
		q, args = q+" AND service_name = ?", append(args, f.Service)
	}
	if !f.IncludeInternal {
		c, a := notInternal()
		q, args = q+" AND "+c, append(args, a...)
	}
	rows, err := s.conn.Query(rollupRead(ctx), q+" GROUP BY t ORDER BY t", args...)
	if err != nil {
		return Latency{}, fmt.Errorf("latency: %w", err)
	}
	defer rows.Close()
	n := int(end.Sub(start) / step)
	out := Latency{Hours: f.Hours, StepSeconds: int(step / time.Second), Service: f.Service, IncludeInternal: f.IncludeInternal,
		Points: make([]LatencyPoint, n)}
	for i := range out.Points {
		out.Points[i].Time = start.Add(time.Duration(i) * step)
	}
	out.Points[n-1].Partial = true
	for rows.Next() {
		var t, lo, hi uint32
		var req, failed uint64
		var cum []uint64
		if err := rows.Scan(&t, &req, &failed, &lo, &hi, &cum); err != nil {
			return Latency{}, fmt.Errorf("latency: %w", err)
		}
		i := int((int64(t) - start.Unix()) / int64(step/time.Second))
		if i < 0 || i >= n || req == 0 {
			continue
		}
		p := &out.Points[i]
		p.Requests, p.Failed = int64(req), int64(failed)
		p.ErrorRate = float64(failed) / float64(req) * 100
		at := func(q float64) *float64 {
			v := percentile(q, req, cum, float64(lo), float64(hi))
			return &v
		}
		p.P50MS, p.P95MS, p.P99MS = at(0.50), at(0.95), at(0.99)
	}
	if err := rows.Err(); err != nil {
		return Latency{}, fmt.Errorf("latency: %w", err)
	}
	return out, nil
}

// latencyPoint is one point of a latency series: its bucket, requests,
// failures, extremes and cumulative duration histogram.
const latencyPoint = `SELECT toUInt32(bucket) AS t, countMerge(requests),
	countIfMerge(errors) + countIfMerge(timeouts) + countIfMerge(cancellations)`
