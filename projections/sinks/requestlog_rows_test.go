package sinks

import (
	"testing"
	"time"

	"github.com/cfgd/cfgd/events/requestlog"
)

// A batch whose size is known beforehand (the sink's weighed records, a
// replay's block) is filled with one allocation per column, whatever its
// size: growing by doubling copied every column about twice over. Compared
// as ratios, since the race detector adds allocations of its own.
func TestGrowAllocatesEachColumnOnce(t *testing.T) {
	e := requestlog.Event{RequestID: "r", ServiceName: "s", MethodName: "m", Status: "success", CreatedAt: time.Unix(1, 0)}
	fill := func(rows int, grow bool) float64 {
		return testing.AllocsPerRun(3, func() {
			var r RequestLogRows
			if grow {
				r.Grow(rows)
			}
			for i := range rows {
				r.Add(1, int64(i), 0, &e)
			}
			if r.Len() != rows {
				t.Fatalf("%d rows, want %d", r.Len(), rows)
			}
		})
	}
	small, large, doubling := fill(10, true), fill(50_000, true), fill(50_000, false)
	if large > small+3 {
		t.Errorf("grown: %.0f allocations for 10 rows, %.0f for 50,000: want as many (one per column) for both", small, large)
	}
	t.Logf("allocations: grown 10 rows %.0f, grown 50,000 %.0f, not grown 50,000 %.0f", small, large, doubling)
	if doubling < 5*large {
		t.Errorf("50,000 rows: %.0f allocations grown, %.0f not: want the doubling to be what Grow saves", large, doubling)
	}
}

// A replay's inserted block is emptied and filled again in the same
// columns (replay.Block.Reset): no new tens of megabytes per insert.
func TestTruncatedRowsFillTheSameColumns(t *testing.T) {
	e := requestlog.Event{RequestID: "r", ServiceName: "s", MethodName: "m", Status: "success", CreatedAt: time.Unix(1, 0)}
	var r RequestLogRows
	r.Grow(1000)
	for i := range 1000 {
		r.Add(1, int64(i), 0, &e)
	}
	id, service := &r.id[0], &r.service[0]
	r.truncate()
	if r.Len() != 0 || len(r.service) != 0 || len(r.reportedBy) != 0 {
		t.Fatalf("truncated: %d rows, %d services, %d reporters", r.Len(), len(r.service), len(r.reportedBy))
	}
	for i := range 1000 {
		r.Add(2, int64(i), 0, &e)
	}
	if &r.id[0] != id || &r.service[0] != service || r.partition[999] != 2 {
		t.Error("the rows were filled again into new columns")
	}
}
