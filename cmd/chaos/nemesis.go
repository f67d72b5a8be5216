package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"syscall"
	"time"
)

const (
	faultKill  = "kill"  // SIGKILL, down for the fault's length, then started again
	faultPause = "pause" // SIGSTOP, SIGCONT after the fault's length: a stalled or partitioned node
)

// fault is one planned operation of the nemesis.
type fault struct {
	N      int           `json:"n"`
	At     time.Duration `json:"at"`
	Target string        `json:"target"`
	Tier   string        `json:"tier"`
	Kind   string        `json:"kind"`
	For    time.Duration `json:"for"`
}

// restartMargin is how long a killed component may take to come back:
// the schedule keeps this free after a kill as after a pause's end.
func restartMargin(f fault) time.Duration {
	if f.Kind == faultPause {
		return 2 * time.Second
	}
	return 15 * time.Second
}

// plan draws the schedule from the seed alone (PCG): which process, which
// fault, when and for how long (1-30 s). Faults overlap, but a
// single-instance component goes down alone, and never every replica of a
// tier at once: a single's fault waits until the faults before it ended,
// and another draw that would break a rule is dropped (the draw is still
// taken, so the schedule depends on the seed only).
func plan(seed uint64, length time.Duration, targets []*component) []fault {
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []fault
	end := func(f fault) time.Duration { return f.At + f.For + restartMargin(f) }
	overlaps := func(a, b fault) bool { return a.At < end(b) && b.At < end(a) }
	var singles, others []*component
	for _, c := range targets {
		if c.tier == tierSingle {
			singles = append(singles, c)
		} else {
			others = append(others, c)
		}
	}
	at := 5 * time.Second
	for {
		at += time.Duration(500+rng.IntN(2500)) * time.Millisecond
		if at >= length {
			return out
		}
		// One draw in sixteen goes to a single-instance component:
		// each of their faults holds everything else off for its length.
		pool := others
		if rng.IntN(16) == 0 {
			pool = singles
		}
		c := pool[rng.IntN(len(pool))]
		f := fault{At: at, Target: c.name, Tier: c.tier, Kind: faultKill,
			For: time.Duration(1000+rng.IntN(29000)) * time.Millisecond}
		if rng.IntN(2) == 0 {
			f.Kind = faultPause
		}
		if f.Tier == tierSingle {
			// It waits for a quiet moment: after every fault before it
			// ended, and the next ones come after it.
			for _, g := range out {
				f.At = max(f.At, end(g))
			}
			if f.At >= length {
				return out
			}
			at = f.At
		}
		ok := true
		for _, g := range out {
			if !overlaps(f, g) {
				continue
			}
			if f.Tier == tierSingle || g.Tier == tierSingle || f.Tier == g.Tier {
				ok = false
				break
			}
		}
		if ok {
			f.N = len(out)
			out = append(out, f)
		}
	}
}

// nemesis carries out a schedule against the supervisor's components.
type nemesis struct {
	sup  *supervisor
	hist *history
	// what happened, for the table
	mu       sync.Mutex
	done     map[string]int // kind/tier -> count
	skipped  int
	lastHeal time.Time
}

// constraintHolds checks against the live state what plan checked
// against the schedule: a restart may run late.
func (n *nemesis) constraintHolds(f fault) bool {
	for _, c := range n.sup.comps {
		if c.name == f.Target {
			if c.isFaulted() || !c.alive() {
				return false
			}
			continue
		}
		down := c.isFaulted() || !c.alive()
		if !down {
			continue
		}
		if f.Tier == tierSingle || c.tier == tierSingle || c.tier == f.Tier {
			return false
		}
	}
	return true
}

// run carries out faults from start; it returns once every fault healed.
func (n *nemesis) run(ctx context.Context, start time.Time, faults []fault) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, f := range faults {
		if d := time.Until(start.Add(f.At)); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		// Wait (bounded) until the live state allows it.
		waited := time.Now()
		for !n.constraintHolds(f) && time.Since(waited) < 30*time.Second && ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
		}
		if !n.constraintHolds(f) {
			n.hist.write(map[string]any{"ev": "fault_skipped", "n": f.N, "target": f.Target, "kind": f.Kind, "why": "a peer or a single component is still down"})
			n.mu.Lock()
			n.skipped++
			n.mu.Unlock()
			continue
		}
		c := n.sup.byName(f.Target)
		c.setFaulted(true)
		var err error
		switch f.Kind {
		case faultKill:
			err = c.kill()
		case faultPause:
			err = c.signal(syscall.SIGSTOP)
		}
		n.hist.write(map[string]any{"ev": "fault", "n": f.N, "target": f.Target, "kind": f.Kind, "for_ms": f.For.Milliseconds(),
			"late_ms": time.Since(start.Add(f.At)).Milliseconds(), "err": errString(err)})
		n.mu.Lock()
		n.done[fmt.Sprintf("%s %s", f.Kind, f.Target)]++
		n.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(f.For)
			n.heal(ctx, c, f)
		}()
	}
}

func (n *nemesis) heal(ctx context.Context, c *component, f fault) {
	defer c.setFaulted(false)
	t := time.Now()
	var err error
	switch f.Kind {
	case faultPause:
		err = c.signal(syscall.SIGCONT)
	case faultKill:
		// As a supervisor would: again until it runs.
		for attempt := 0; attempt < 10; attempt++ {
			if err = c.start(ctx); err == nil || ctx.Err() != nil {
				break
			}
			n.hist.write(map[string]any{"ev": "restart_failed", "n": f.N, "target": f.Target, "err": err.Error()})
			time.Sleep(2 * time.Second)
		}
	}
	n.hist.write(map[string]any{"ev": "heal", "n": f.N, "target": f.Target, "kind": f.Kind, "ms": time.Since(t).Milliseconds(), "err": errString(err)})
	n.mu.Lock()
	n.lastHeal = time.Now()
	n.mu.Unlock()
}
