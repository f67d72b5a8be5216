package main

import (
	"math"
	"strings"
	"testing"
)

// TestTrendAndCheck: the growth is the second half's least-squares slope
// times the half's length (the chart's fit line rises by as much); a
// series fails only beyond its tolerance, and the first half (warm-up)
// does not count.
func TestTrendAndCheck(t *testing.T) {
	col := func(name string) int {
		for i, se := range allSeries {
			if se.name == name {
				return i
			}
		}
		t.Fatalf("no series %s", name)
		return 0
	}
	goroutines := col("serve_goroutines")
	cases := []struct {
		name   string
		value  func(t float64) float64
		growth float64
		fails  bool
	}{
		{"flat", func(float64) float64 { return 600 }, 0, false},
		{"warm-up then flat", func(t float64) float64 { return min(600, 100+2*t) }, 0, false},
		{"saw-tooth", func(t float64) float64 { return 600 + 20*math.Sin(t) }, 0, false},
		{"leak of one goroutine a minute", func(t float64) float64 { return 600 + t/60 }, 5, false},
		{"leak of one goroutine every 2 s", func(t float64) float64 { return 600 + t/2 }, 150, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &samples{}
			for i := range 61 { // 10 minutes, a sample every 10 s
				ts := float64(i * 10)
				row := make([]float64, len(allSeries))
				for j := range row {
					row[j] = 1
				}
				row[goroutines] = tc.value(ts)
				s.t = append(s.t, ts)
				s.rows = append(s.rows, row)
			}
			growth, _, n := s.trend(goroutines)
			if n != 31 {
				t.Fatalf("second half has %d samples, want 31", n)
			}
			if math.Abs(growth-tc.growth) > 3 {
				t.Errorf("growth %.2f, want about %.2f", growth, tc.growth)
			}
			// The chart's line is the same fit: it rises by the growth.
			if fit := s.fitLine(goroutines); len(fit) != 2 || math.Abs(fit[1].Y-fit[0].Y-growth) > 1e-9 {
				t.Errorf("fit line %v, want one rising by %.2f", fit, growth)
			}
			fails := s.check(0)
			failed := len(fails) == 1 && strings.HasPrefix(fails[0], "serve_goroutines:")
			if failed != tc.fails || (!tc.fails && len(fails) > 0) {
				t.Errorf("check = %q, want serve_goroutines failing: %v", fails, tc.fails)
			}
		})
	}
}
