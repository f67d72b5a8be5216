package requestlogview

import (
	"context"
	"fmt"
	"time"
)

// MaxTimelineHours bounds the timeline window: up to a day it has one
// point per minute (at most 1440), beyond that one per hour (at most 720),
// so a chart never receives more points than it can draw.
const (
	MaxTimelineHours    = 720
	minuteTimelineHours = 24
)

// ParseTimelineHours reads the hours of a timeline: empty is 1, else an
// integer 1..MaxTimelineHours.
func ParseTimelineHours(raw string) (int, error) {
	if raw == "" {
		return 1, nil
	}
	return parseInt("hours", raw, 1, MaxTimelineHours)
}

// Point is one bucket of a timeline. Failed counts errors, timeouts and
// cancellations, as failed_requests does in the statistics.
type Point struct {
	Time     time.Time `json:"time"`
	Requests int64     `json:"requests"`
	Failed   int64     `json:"failed"`
	// ErrorRate is Failed in percent of Requests, 0 without requests.
	ErrorRate float64 `json:"error_rate"`
}

// Timeline is the request rate over the last hours hours.
type Timeline struct {
	Hours       int     `json:"hours"`
	StepSeconds int     `json:"step_seconds"`
	Service     string  `json:"service"`
	Points      []Point `json:"points"`
}

// Timeline returns the requests and failures per bucket over the last
// hours hours (optionally of one service), oldest first, with a point for
// every bucket of the window, empty ones included. It reads the minute
// rollup (hour rollup beyond a day), never raw rows.
func (s *Store) Timeline(ctx context.Context, hours int, service string) (Timeline, error) {
	return retry(ctx, func() (Timeline, error) { return s.timelineAttempt(ctx, hours, service) })
}

func (s *Store) timelineAttempt(ctx context.Context, hours int, service string) (Timeline, error) {
	if _, err := parseInt("hours", fmt.Sprint(hours), 1, MaxTimelineHours); err != nil {
		return Timeline{}, err
	}
	step, table := time.Minute, MinuteTable
	if hours > minuteTimelineHours {
		step, table = time.Hour, HourTable
	}
	// The current (partial) bucket is the last point, as in window().
	end := s.now().UTC().Truncate(step).Add(step)
	start := end.Add(-time.Duration(hours) * time.Hour)
	q := timelinePoint + " FROM " + table + " WHERE bucket >= toDateTime(?) AND bucket < toDateTime(?)"
	args := []any{start.Unix(), end.Unix()}
	if service != "" {
		q += " AND service_name = ?"
		args = append(args, service)
	}
	q += " GROUP BY t ORDER BY t"
	rows, err := s.conn.Query(rollupRead(ctx), q, args...)
	if err != nil {
		return Timeline{}, fmt.Errorf("timeline: %w", err)
	}
	defer rows.Close()
	n := int(end.Sub(start) / step)
	out := Timeline{Hours: hours, StepSeconds: int(step / time.Second), Service: service, Points: make([]Point, n)}
	for i := range out.Points {
		out.Points[i].Time = start.Add(time.Duration(i) * step)
	}
	for rows.Next() {
		var t uint32
		var req, failed uint64
		if err := rows.Scan(&t, &req, &failed); err != nil {
			return Timeline{}, fmt.Errorf("timeline: %w", err)
		}
		i := int((int64(t) - start.Unix()) / int64(step/time.Second))
		if i < 0 || i >= n {
			continue
		}
		p := &out.Points[i]
		p.Requests, p.Failed = int64(req), int64(failed)
		if req > 0 {
			p.ErrorRate = float64(failed) / float64(req) * 100
		}
	}
	if err := rows.Err(); err != nil {
		return Timeline{}, fmt.Errorf("timeline: %w", err)
	}
	return out, nil
}

// timelinePoint is one point of a timeline: its bucket, its requests and
// its failures.
const timelinePoint = `SELECT toUInt32(bucket) AS t, countMerge(requests),
	countIfMerge(errors) + countIfMerge(timeouts) + countIfMerge(cancellations)`
