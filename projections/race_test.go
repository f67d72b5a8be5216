package projections_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cfgd/cfgd/projections"
)

// Two writers apply the same event at once, outside any partition lock (as
// Apply, or the same stream found in two partitions after a partition
// change does): both read checkpoint 0 and run the handler, and the one
// whose checkpoint save finds the row already moved must roll back, its
// handler's writes with it. The read model holds the event once, and a
// third try finds a duplicate.
func TestCheckpointRaceRollsBackTheLoser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, reg := setup(t, 1)
	env := appendEvents(t, pool, "acc-race", deposited{5})[0]

	// Every handler call waits until two are in: both writers have read
	// the checkpoint before either saves.
	var in atomic.Int32
	both := make(chan struct{})
	overlapped := atomic.Bool{}
	p, _ := balances(func(int32, *deposited) error {
		if in.Add(1) == 2 {
			close(both)
		}
		select {
		case <-both:
			overlapped.Store(true)
		case <-time.After(10 * time.Second):
		}
		return nil
	})

	outcomes := make([]projections.Outcome, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { outcomes[i], errs[i] = projections.Apply(ctx, pool, reg, p, env) })
	}
	wg.Wait()
	if !overlapped.Load() {
		t.Fatal("the two writers never overlapped: the race path was not reached")
	}
	applied, failed := 0, 0
	for i := range 2 {
		switch {
		case errs[i] != nil:
			failed++
		case outcomes[i] == projections.Applied:
			applied++
		}
	}
	if applied != 1 || failed != 1 {
		t.Fatalf("outcomes %v, errors %v: want one applied and one rolled back", outcomes, errs)
	}
	if got := snapshot(t, pool)["acc-race"]; got != (balance{5, "1"}) {
		t.Fatalf("balance %+v, want the deposit of 5 once (v1)", got)
	}
	// The loser's retry, as the runner makes it, is a duplicate.
	if got, err := projections.Apply(ctx, pool, reg, p, env); err != nil || got != projections.Duplicate {
		t.Fatalf("retry: %v %v, want a duplicate", got, err)
	}
}
