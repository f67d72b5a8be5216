package outbox

import (
	"testing"
	"time"
)

// Restarts back off while runs fail fast and start over after a run that
// lasted; a relay that ran for hours does not wait 5s after one hiccup.
// The waits are jittered by half either way, so each case checks a bound.
func TestRestartsBackOff(t *testing.T) {
	t.Parallel()
	fast := func(r *restarts, n int) time.Duration {
		var d time.Duration
		for range n {
			d = r.next(time.Second)
		}
		return d
	}
	tests := []struct {
		name string
		wait func(r *restarts) time.Duration
		ok   func(d time.Duration) bool
	}{
		{"first failure", func(r *restarts) time.Duration { return r.next(0) },
			func(d time.Duration) bool { return d > 0 && d <= minBackoff*3/2 }},
		{"failing fast grows", func(r *restarts) time.Duration { return fast(r, 6) },
			func(d time.Duration) bool { return d > minBackoff*3/2 }},
		{"capped", func(r *restarts) time.Duration { return fast(r, 40) },
			func(d time.Duration) bool { return d <= maxBackoff }},
		{"after a healthy run", func(r *restarts) time.Duration { fast(r, 20); return r.next(time.Hour) },
			func(d time.Duration) bool { return d <= minBackoff*3/2 }},
		{"just healthy", func(r *restarts) time.Duration { fast(r, 20); return r.next(healthyRun) },
			func(d time.Duration) bool { return d <= minBackoff*3/2 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for range 50 { // jitter: hold for many draws
				var r restarts
				if d := tc.wait(&r); !tc.ok(d) {
					t.Fatalf("wait %v", d)
				}
			}
		})
	}
}
