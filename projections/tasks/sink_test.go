package tasks_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
	taskproj "github.com/cfgd/cfgd/projections/tasks"
)

// The sink's figures are exact whatever the delivery: steps delivered
// twice count once, and a task's end wins over steps that arrive after it.
func TestSinkIsIdempotentAndOrderProof(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	c := testenv.Kafka(t, 3)
	ctx := context.Background()
	if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), tasks.TopicLifecycle); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	rec := func(id, step string, attempt int) tasks.Lifecycle {
		return tasks.Lifecycle{TaskID: id, Queue: "default", Type: "demo:echo", Step: step, Attempt: attempt, WorkerID: "w1", At: at.Add(time.Duration(attempt) * time.Second)}
	}
	sent := []tasks.Lifecycle{
		// a: in order.
		rec("a", tasks.StepEnqueued, 0), rec("a", tasks.StepStarted, 1), rec("a", tasks.StepSucceeded, 1),
		// b: the worker's steps before the enqueuer's, then a retry that failed.
		rec("b", tasks.StepStarted, 1), rec("b", tasks.StepRetried, 1), rec("b", tasks.StepStarted, 2),
		rec("b", tasks.StepFailed, 2), rec("b", tasks.StepEnqueued, 0),
		// c: still running.
		rec("c", tasks.StepEnqueued, 0), rec("c", tasks.StepStarted, 1),
	}
	produce(t, c, sent)
	produce(t, c, sent) // every step again: a redelivery
	sink := taskproj.NewSink(pool, c, testenv.Quiet())
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sink.Run(sctx) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(20 * time.Second)
	for {
		var steps int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM task_lifecycle`).Scan(&steps); err != nil {
			t.Fatal(err)
		}
		if steps == len(sent) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d steps recorded, want %d", steps, len(sent))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the duplicates, if they were to count
	want := map[string]struct {
		state    string
		attempts int
	}{"a": {"succeeded", 1}, "b": {"failed", 2}, "c": {"started", 1}}
	rows, err := pool.Query(ctx, `SELECT task_id, state, attempts, enqueued_at IS NOT NULL, finished_at IS NOT NULL FROM task_runs ORDER BY task_id`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var id, state string
		var attempts int
		var enq, fin bool
		if err := rows.Scan(&id, &state, &attempts, &enq, &fin); err != nil {
			t.Fatal(err)
		}
		n++
		w := want[id]
		if state != w.state || attempts != w.attempts || !enq || fin != (id != "c") {
			t.Errorf("task %s: state %s attempts %d enqueued %v finished %v, want %+v", id, state, attempts, enq, fin, w)
		}
	}
	if n != 3 {
		t.Fatalf("%d task rows, want 3", n)
	}
}

func produce(t *testing.T, c kafka.Config, recs []tasks.Lifecycle) {
	t.Helper()
	p, err := sarama.NewSyncProducer(c.Brokers, c.ProducerSarama())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, r := range recs {
		b, _ := json.Marshal(r)
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: c.Topic(tasks.TopicLifecycle), Key: sarama.StringEncoder(r.TaskID), Value: sarama.ByteEncoder(b)}); err != nil {
			t.Fatal(err)
		}
	}
}
