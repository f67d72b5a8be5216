package requestlogview_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

func TestTimeline(t *testing.T) {
	t.Parallel()
	// now is 12:34:56: the 1-hour timeline runs from 11:35 to the current
	// minute 12:34, one point per minute.
	conn := seed(t,
		row{now.Add(-61 * time.Minute), "a", "m", "success", 1}, // 11:33:56, outside
		row{time.Date(2026, 11, 23, 11, 35, 0, 0, time.UTC), "a", "m", "success", 1},
		row{time.Date(2026, 11, 23, 11, 35, 30, 0, time.UTC), "a", "m", "error", 1},
		row{time.Date(2026, 11, 23, 11, 35, 59, 0, time.UTC), "b", "m", "timeout", 1},
		row{time.Date(2026, 11, 23, 12, 34, 59, 0, time.UTC), "a", "m", "cancelled", 1},
		row{time.Date(2026, 11, 23, 12, 35, 0, 0, time.UTC), "a", "m", "success", 1}, // the future
		row{time.Date(2026, 11, 23, 2, 10, 0, 0, time.UTC), "a", "m", "success", 1},  // inside 24h only
	)
	store := requestlogview.New(conn, clock, nil)
	ctx := context.Background()
	type pt struct {
		at          time.Time
		req, failed int64
		errorRate   float64
	}
	cases := []struct {
		name    string
		hours   int
		service string
		step    int
		points  int
		want    []pt // the non-empty points
	}{
		{"one hour by minute", 1, "", 60, 60, []pt{
			{time.Date(2026, 11, 23, 11, 35, 0, 0, time.UTC), 3, 2, 200.0 / 3},
			{time.Date(2026, 11, 23, 12, 34, 0, 0, time.UTC), 1, 1, 100},
		}},
		{"one service", 1, "b", 60, 60, []pt{{time.Date(2026, 11, 23, 11, 35, 0, 0, time.UTC), 1, 1, 100}}},
		{"a day by minute", 24, "", 60, 1440, []pt{
			{time.Date(2026, 11, 23, 2, 10, 0, 0, time.UTC), 1, 0, 0},
			{time.Date(2026, 11, 23, 11, 33, 0, 0, time.UTC), 1, 0, 0},
			{time.Date(2026, 11, 23, 11, 35, 0, 0, time.UTC), 3, 2, 200.0 / 3},
			{time.Date(2026, 11, 23, 12, 34, 0, 0, time.UTC), 1, 1, 100},
		}},
		{"two days by hour", 48, "", 3600, 48, []pt{
			{time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC), 1, 0, 0},
			{time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC), 4, 2, 50},
			// The current hour holds the whole hour, "future" row included.
			{time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), 2, 1, 50},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tl, err := store.Timeline(ctx, tc.hours, tc.service)
			if err != nil {
				t.Fatal(err)
			}
			if tl.StepSeconds != tc.step || len(tl.Points) != tc.points || tl.Hours != tc.hours {
				t.Fatalf("step %d, %d points, hours %d", tl.StepSeconds, len(tl.Points), tl.Hours)
			}
			var got []pt
			for i, p := range tl.Points {
				if i > 0 && p.Time.Sub(tl.Points[i-1].Time) != time.Duration(tc.step)*time.Second {
					t.Fatalf("point %d at %v after %v", i, p.Time, tl.Points[i-1].Time)
				}
				if p.Requests > 0 {
					got = append(got, pt{p.Time, p.Requests, p.Failed, p.ErrorRate})
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("non-empty points %v, want %v", got, tc.want)
			}
			for i := range got {
				w := tc.want[i]
				if !got[i].at.Equal(w.at) || got[i].req != w.req || got[i].failed != w.failed || got[i].errorRate-w.errorRate > 1e-9 || w.errorRate-got[i].errorRate > 1e-9 {
					t.Errorf("point %d: %v, want %v", i, got[i], w)
				}
			}
		})
	}
	for _, h := range []int{0, -1, 721} {
		var inv *errcode.Error
		if _, err := store.Timeline(ctx, h, ""); !errors.As(err, &inv) || inv.Code != errcode.Invalid || inv.Fields["hours"] == "" {
			t.Errorf("hours %d: %v", h, err)
		}
	}
	for raw, want := range map[string]int{"": 1, "6": 6, "720": 720} {
		if got, err := requestlogview.ParseTimelineHours(raw); err != nil || got != want {
			t.Errorf("ParseTimelineHours(%q) = %d, %v", raw, got, err)
		}
	}
	for _, raw := range []string{"0", "721", "abc", "1.5"} {
		if _, err := requestlogview.ParseTimelineHours(raw); err == nil {
			t.Errorf("ParseTimelineHours(%q) accepted", raw)
		}
	}
}
