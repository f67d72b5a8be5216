package process

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, s)
}

// runner records its start and, once told to stop, its stop; stopDelay
// lets a test see that the next stage waits for it.
func (j *journal) runner(name string, stopDelay time.Duration) Runner {
	return Runner{Name: name, Run: func(ctx context.Context) error {
		j.add("start " + name)
		<-ctx.Done()
		time.Sleep(stopDelay)
		j.add("stop " + name)
		return nil
	}}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestServersStopBeforeBackground(t *testing.T) {
	j := &journal{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunStages(ctx, quiet(),
			[]Runner{j.runner("pipeline", 0)}, []Runner{j.runner("http", 100*time.Millisecond)},
		)
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stopHTTP, stopPipeline := slices.Index(j.lines, "stop http"), slices.Index(j.lines, "stop pipeline")
	if stopHTTP < 0 || stopPipeline < 0 || stopHTTP > stopPipeline {
		t.Fatalf("order: %v", j.lines)
	}
}

func TestAFailingRunnerStopsTheGroup(t *testing.T) {
	j := &journal{}
	boom := errors.New("boom")
	err := RunStages(context.Background(), quiet(),
		[]Runner{j.runner("pipeline", 0)},
		[]Runner{j.runner("http", 0), {Name: "grpc", Run: func(context.Context) error { return boom }}},
	)
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if !slices.Contains(j.lines, "stop http") || !slices.Contains(j.lines, "stop pipeline") {
		t.Fatalf("not everything stopped: %v", j.lines)
	}
}

func TestARunnerThatReturnsEarlyIsAFailure(t *testing.T) {
	err := RunStages(context.Background(), quiet(), []Runner{{Name: "quitter", Run: func(context.Context) error { return nil }}})
	if err == nil {
		t.Fatal("a runner that quits on its own went unnoticed")
	}
}
