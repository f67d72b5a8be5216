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
