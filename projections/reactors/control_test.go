package reactors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cfgd/cfgd/events/tasks"
)

// flaky fails its first fails calls, as a broker that is down for a while.
type flaky struct {
	fails, calls int
	got          []tasks.Lifecycle
}

func (f *flaky) PublishLifecycle(_ context.Context, recs []tasks.Lifecycle) error {
	f.calls++
	if f.calls <= f.fails {
		return errors.New("kafka: broker not available")
	}
	f.got = append(f.got, recs...)
	return nil
}

// The cleared tasks' records wait for the broker: once the tasks are
// deleted, only these records can close them in the statistics.
func TestPublishRetryingWaitsForTheBroker(t *testing.T) {
	t.Parallel()
	recs := []tasks.Lifecycle{{TaskID: "a", Step: tasks.StepCleared}, {TaskID: "b", Step: tasks.StepCleared}}
	f := &flaky{fails: 3}
	if err := publishRetrying(context.Background(), f, recs); err != nil || f.calls != 4 || len(f.got) != 2 {
		t.Fatalf("err %v after %d calls, published %v", err, f.calls, f.got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	down := &flaky{fails: 1 << 30}
	if err := publishRetrying(ctx, down, recs); !errors.Is(err, context.DeadlineExceeded) || down.calls < 2 {
		t.Fatalf("with the broker down until shutdown: %v after %d calls", err, down.calls)
	}
}
