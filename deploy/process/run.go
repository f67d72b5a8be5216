package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Runner is a long-running part of a capability. Run blocks until ctx
// ends (returning nil) or the runner fails.
type Runner struct {
	Name string
	Run  func(ctx context.Context) error
}

// RunStages starts stages in order and stops them in reverse order: stage
// i+1 has returned before stage i is told to stop. A failure in any stage
// stops them all, in the same order.
func RunStages(ctx context.Context, log *slog.Logger, stages ...[]Runner) error {
	failed, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var first error
	var once sync.Once
	record := func(name string, err error) {
		once.Do(func() { first = fmt.Errorf("%s: %w", name, err) })
		fail(err)
	}
	// Each stage runs under its own context, detached from ctx so it can
	// outlive the stages started after it.
	type running struct {
		stop context.CancelFunc
		done *sync.WaitGroup
	}
	var started []running
	for _, stage := range stages {
		sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		wg := &sync.WaitGroup{}
		for _, r := range stage {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := r.Run(sctx)
				switch {
				case err != nil && !errors.Is(err, context.Canceled):
					log.Error("runner failed", "runner", r.Name, "err", err)
					record(r.Name, err)
				case sctx.Err() == nil:
					// A runner that returns on its own while the group is
					// still up would leave a capability silently missing.
					record(r.Name, errors.New("stopped unexpectedly"))
				}
			}()
		}
		started = append(started, running{stop: stop, done: wg})
	}
	<-failed.Done()
	for i := len(started) - 1; i >= 0; i-- {
		started[i].stop()
		started[i].done.Wait()
	}
	return first
}
