package replay

import (
	"slices"
	"testing"
)

func TestFillEdgesSplitOnWholeMinutes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lo, hi int64
		n      int
		want   []int64
	}{
		{"an hour in four", 0, 3599, 4, []int64{0, 900, 1800, 2700, 3600}},
		{"ranges of at least a minute", 30, 100, 4, []int64{0, 60, 101}},
		{"one instant", 125, 125, 4, []int64{120, 126}},
		{"three days in four", 1_700_000_000, 1_700_259_199, 4, []int64{1_699_999_980, 1_700_064_840, 1_700_129_700, 1_700_194_560, 1_700_259_200}},
		{"one range: the whole table", 0, 3599, 1, nil},
		{"an empty table", 10, 0, 4, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fillEdges(tc.lo, tc.hi, tc.n)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("fillEdges(%d, %d, %d) = %v, want %v", tc.lo, tc.hi, tc.n, got, tc.want)
			}
			for i, e := range got[:max(len(got)-1, 0)] {
				if e%60 != 0 || got[i+1] <= e {
					t.Errorf("edge %d = %d: want whole minutes, ascending", i, e)
				}
			}
		})
	}
}
