package outbox

import (
	"testing"
	"time"
)

// Restarts back off while runs fail fast and start over after a run that
// lasted; a relay that ran for hours does not wait 5s after one hiccup.
func TestNextBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		prev, ran time.Duration
		want      time.Duration
	}{
		{"first failure", 0, 0, minBackoff},
		{"failing fast doubles", 400 * time.Millisecond, time.Second, 800 * time.Millisecond},
		{"capped", 4 * time.Second, time.Second, maxBackoff},
		{"after a healthy run", maxBackoff, time.Hour, minBackoff},
		{"just healthy", maxBackoff, healthyRun, minBackoff},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextBackoff(tc.prev, tc.ran); got != tc.want {
				t.Fatalf("nextBackoff(%v, %v) = %v, want %v", tc.prev, tc.ran, got, tc.want)
			}
		})
	}
}
