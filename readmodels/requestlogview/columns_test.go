package requestlogview

import (
	"strings"
	"testing"
	"time"
)

// ClickHouse 18.16 reads every column a UNION ALL branch names, and a long
// window's branches open one part per day: the overview's branches name
// only the counts it adds up, not the histogram, extremes or methods.
func TestOverviewReadsOnlyItsColumns(t *testing.T) {
	src, _ := source(window(time.Unix(1_700_000_000, 0), 720), overviewCols, "")
	for _, col := range []string{"duration_le_", "duration_min", "duration_max", "method_name"} {
		if strings.Contains(src, col) {
			t.Errorf("the overview's rollup reads name %s: %s", col, src)
		}
	}
	if n := strings.Count(src, "duration_sum"); n != len(window(time.Unix(1_700_000_000, 0), 720)) {
		t.Errorf("duration_sum named %d times in %s", n, src)
	}
}
