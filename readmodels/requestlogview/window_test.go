package requestlogview

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The spans of every window cover exactly its minutes, in order, each
// aligned to its rollup's bucket size.
func TestWindowSpansTileTheWindow(t *testing.T) {
	size := map[string]int64{MinuteTable: 60, HourTable: 3600, DayTable: 86400}
	r := rand.New(rand.NewPCG(5, 6))
	for range 5000 {
		now := time.Unix(1_700_000_000+r.Int64N(400*86400), 0)
		hours := 1 + r.IntN(MaxHours)
		if r.IntN(3) == 0 {
			hours = []int{1, 2, 23, 24, 25, 48, 720, 8760}[r.IntN(8)]
		}
		spans := window(now, hours)
		end := now.UTC().Truncate(time.Minute).Add(time.Minute).Unix()
		start := end - int64(hours)*3600
		slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.from, b.from) })
		at := start
		for _, sp := range spans {
			n := size[sp.table]
			if sp.from != at || sp.from%n != 0 || sp.to%n != 0 || sp.from >= sp.to {
				t.Fatalf("now %v hours %d: span %+v where %d was expected", now, hours, sp, at)
			}
			at = sp.to
		}
		if at != end {
			t.Fatalf("now %v hours %d: spans end at %d, not %d", now, hours, at, end)
		}
		if len(spans) > 5 {
			t.Fatalf("%d spans", len(spans))
		}
	}
}

func TestPercentile(t *testing.T) {
	// Bounds 1, 2, 5, 10, 20, 50, 100, ...
	cum := func(counts ...uint64) []uint64 {
		out := make([]uint64, len(DurationBounds()))
		for i := range out {
			if i < len(counts) {
				out[i] = counts[i]
			} else {
				out[i] = counts[len(counts)-1]
			}
		}
		return out
	}
	cases := []struct {
		name         string
		total        uint64
		cum          []uint64
		lo, hi, want float64
	}{
		{"empty", 0, cum(0), 0, 0, 0},
		{"all at 1ms", 100, cum(100), 1, 1, 1},
		{"half to 10, rest to 20", 100, cum(0, 0, 0, 50, 100), 6, 20, 19},
		{"clamped to max", 100, cum(0, 0, 0, 0, 100), 15, 16, 16},
		{"beyond the last bound", 10, cum(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5), 100, 90000, 90000},
	}
	for _, c := range cases {
		if got := percentile(0.95, c.total, c.cum, c.lo, c.hi); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
