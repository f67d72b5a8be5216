package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
	"github.com/cfgd/cfgd/readmodels/identityview"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// midReplay is one `cfgd replay` run while the load and the faults go on.
type midReplay struct {
	names    []string
	at       time.Duration // into the schedule
	attempts int
	done     bool
	took     time.Duration // of the attempt that succeeded
	errs     []string
}

// midReplays runs, while the load and the nemesis go on, one `cfgd replay`
// of Postgres read models (the API keys with their usage feed, then the
// task queues with their lifecycle feed or the users, by the seed) at
// 40 % of the schedule and of the request-log view (ClickHouse, on the
// cluster) at 60 %, as an operator would. An attempt that fails (a
// dependency down: the ClickHouse replay is refused while a server is
// down, and one cut in its swap leaves the sink waiting until the next
// replay) is tried again every 3 s until one succeeds, or until 5
// minutes after the schedule's end (not when the load stops: a replay cut
// in its swap would leave the sink waiting). The checks after healing
// must hold all the same.
func (ld *loader) midReplays(ctx context.Context, start time.Time, length time.Duration) (func(), []*midReplay) {
	ctx, cancel := context.WithDeadline(ctx, start.Add(length+5*time.Minute))
	second := []string{taskview.QueuesProjection, identityview.UsersProjection}[ld.seed%2]
	plan := []*midReplay{
		{names: []string{apikeyview.KeysProjection, second}, at: length * 4 / 10},
		{names: []string{replay.RequestLogName}, at: length * 6 / 10},
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel()
		for _, m := range plan {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(start.Add(m.at))):
			}
			ld.replayUntilDone(ctx, m)
		}
	}()
	return wg.Wait, plan
}

func (ld *loader) replayUntilDone(ctx context.Context, m *midReplay) {
	for ctx.Err() == nil {
		m.attempts++
		t := time.Now()
		_, err := ld.r.cli(ctx, 4*time.Minute, append([]string{"replay"}, m.names...)...)
		ld.hist.write(map[string]any{"ev": "op", "op": "replay", "names": m.names, "attempt": m.attempts, "err": errString(err),
			"ms": time.Since(t).Milliseconds()})
		if err == nil {
			m.done, m.took = true, time.Since(t)
			ld.l.op("replay " + strings.Join(m.names, " ") + ": done")
			return
		}
		m.errs = append(m.errs, fmt.Sprintf("%.0fs: %v", time.Since(t).Seconds(), err))
		ld.l.op("replay " + strings.Join(m.names, " ") + ": failed, tried again")
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
		}
	}
}

// replays: each mid-run replay completed (the stores were checked after
// it: the request log exactly once, the statistics, the read models).
func (ck *checker) replays(plan []*midReplay) {
	for _, m := range plan {
		if !m.done {
			ck.rp.violate("cfgd replay %s at %v never completed in %d attempts: %s", strings.Join(m.names, " "), m.at.Round(time.Second), m.attempts, strings.Join(first(m.errs, 3), "; "))
			continue
		}
		ck.rp.note("cfgd replay %s during the run (from %v): done in %v at attempt %d", strings.Join(m.names, " "), m.at.Round(time.Second), m.took.Round(time.Millisecond), m.attempts)
	}
}
