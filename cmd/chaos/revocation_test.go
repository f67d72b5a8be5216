package main

import (
	"testing"
	"time"
)

// A revocation's lag counts from the revoke's answer, or from when a serve
// replica stopped meanwhile (its projections' partitions waiting for it)
// was back; a fault of another process does not move it.
func TestRevocationLag(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name     string
		comps    []*component
		accepted time.Duration // after the revoke at t0; 0: none
		want     time.Duration
	}{
		{"no fault", nil, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"none accepted", []*component{{name: "serve-0", spans: [][2]time.Time{{at(-1000), at(2000)}}}}, 0, 0},
		{"seed 641408792: serve-0 paused over the revoke, accepted 1 s after its return",
			[]*component{{name: "serve-0", spans: [][2]time.Time{{at(-10000), at(2143)}}}}, 3137 * time.Millisecond, 994 * time.Millisecond},
		{"a serve fault before the revoke does not count", []*component{{name: "serve-1", spans: [][2]time.Time{{at(-10000), at(-1000)}}}}, 3 * time.Second, 3 * time.Second},
		{"a ClickHouse fault does not count", []*component{{name: "s1r1", spans: [][2]time.Time{{at(-1000), at(2000)}}}}, 3 * time.Second, 3 * time.Second},
		{"a serve still stopped when the call was accepted", []*component{{name: "serve-1", faulted: true, since: at(1000)}}, 3 * time.Second, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := revocationLag(&supervisor{comps: tc.comps}, t0, tc.accepted); got != tc.want {
				t.Errorf("lag %v, want %v", got, tc.want)
			}
		})
	}
}

// A revocation right after Postgres or the broker came back is not judged:
// a projection may wait its longest retry before it moves again (seed
// 79486595: Postgres back 1.5 s before a logout, its access token accepted
// 4.3 s after it).
func TestRevocationExcused(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name  string
		comps []*component
		want  bool
	}{
		{"no fault", nil, false},
		{"Postgres back 1.5 s before", []*component{{name: "postgres", spans: [][2]time.Time{{at(-12000), at(-1554)}}}}, true},
		{"the broker paused after", []*component{{name: "broker", spans: [][2]time.Time{{at(2000), at(3000)}}}}, true},
		{"Postgres back 7 s before", []*component{{name: "postgres", spans: [][2]time.Time{{at(-20000), at(-7000)}}}}, false},
		{"a serve fault is not a dependency's", []*component{{name: "serve-0", spans: [][2]time.Time{{at(-2000), at(2000)}}}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := revocationExcused(&supervisor{comps: tc.comps}, t0, 4266*time.Millisecond); got != tc.want {
				t.Errorf("excused %v, want %v", got, tc.want)
			}
		})
	}
}
