package main

import (
	"reflect"
	"testing"
	"time"
)

// TestPlan checks the schedule's rules for many seeds: it depends on the
// seed alone, every fault lasts 1-30 s, a single-instance component's
// fault overlaps nothing, and no two members of a tier are down at once.
func TestPlan(t *testing.T) {
	var targets []*component
	for _, c := range []struct{ name, tier string }{
		{"zookeeper", tierSingle}, {"postgres", tierSingle}, {"redis", tierSingle}, {"broker", tierSingle},
		{"s1r1", tierShard1}, {"s1r2", tierShard1}, {"s2r1", tierShard2}, {"s2r2", tierShard2},
		{"serve-0", tierServe}, {"serve-1", tierServe}, {"worker", tierWorker},
	} {
		targets = append(targets, &component{name: c.name, tier: c.tier})
	}
	kinds := map[string]int{}
	for seed := range uint64(200) {
		a, b := plan(seed, 10*time.Minute, targets), plan(seed, 10*time.Minute, targets)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two schedules differ", seed)
		}
		if len(a) < 20 {
			t.Errorf("seed %d: %d faults in 10 minutes", seed, len(a))
		}
		for i, f := range a {
			kinds[f.Kind+" "+f.Tier]++
			if f.For < time.Second || f.For > 30*time.Second {
				t.Errorf("seed %d: fault %d lasts %v", seed, i, f.For)
			}
			for _, g := range a[:i] {
				if g.At+g.For+restartMargin(g) <= f.At {
					continue
				}
				if f.Tier == tierSingle || g.Tier == tierSingle || f.Tier == g.Tier {
					t.Errorf("seed %d: %s %s at %v overlaps %s %s at %v", seed, f.Kind, f.Target, f.At, g.Kind, g.Target, g.At)
				}
			}
		}
	}
	t.Logf("faults over 200 seeds: %v", kinds)
}
