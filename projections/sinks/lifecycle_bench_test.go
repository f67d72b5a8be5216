package sinks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
)

// BenchmarkReplayLifecycleFeed replays the task views with 100,000
// lifecycle records (25,000 tasks: enqueued, started, succeeded and a
// redelivered start) and reports the records read per second:
//
//	go test -run '^$' -bench ReplayLifecycleFeed -benchtime 3x ./projections/sinks/
func BenchmarkReplayLifecycleFeed(b *testing.B) {
	ctx := context.Background()
	pool := testenv.Postgres(b)
	c := testenv.Kafka(b, 3)
	pub, err := tasks.NewProducer(c, testenv.Signer(b), testenv.Quiet())
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	const n = 100_000
	steps := []string{tasks.StepEnqueued, tasks.StepStarted, tasks.StepSucceeded, tasks.StepStarted}
	recs := make([]tasks.Lifecycle, 0, 1000)
	at := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	for i := range n {
		recs = append(recs, tasks.Lifecycle{TaskID: fmt.Sprint("t", i/4), Queue: "q", Type: "demo:echo", Step: steps[i%4], Attempt: min(i%4, 1), At: at.Add(time.Duration(i) * time.Millisecond)})
		if len(recs) == cap(recs) {
			if err := pub.PublishLifecycle(ctx, recs); err != nil {
				b.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	reg, err := events.NewRegistry(tasks.Events()...)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := replay.Run(ctx, pool, reg, sinks.ViewsWithLifecycle(c, testenv.Signer(b), nil, testenv.Quiet()), replay.Config{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	var done int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM task_runs WHERE state = 'succeeded'`).Scan(&done); err != nil || done != n/4 {
		b.Fatalf("%d tasks succeeded (%v), want %d", done, err, n/4)
	}
}
