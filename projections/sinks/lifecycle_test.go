package sinks_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections/sinks"
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
	produce(t, c, testenv.Signer(t), sent)
	produce(t, c, testenv.Signer(t), sent) // every step again: a redelivery
	sink := sinks.NewLifecycle(pool, c, testenv.Signer(t), testenv.Quiet())
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

// produce sends recs as raw records, signed by signer (none when nil).
func produce(t *testing.T, c kafka.Config, signer *events.Signer, recs []tasks.Lifecycle) {
	t.Helper()
	p, err := kafka.NewProducer(c, kafka.ProducerOptions{}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, r := range recs {
		b, _ := json.Marshal(r)
		m := &sarama.ProducerMessage{Topic: c.Topic(tasks.TopicLifecycle), Key: sarama.StringEncoder(r.TaskID), Value: sarama.ByteEncoder(b)}
		if signer != nil {
			m.Headers = []sarama.RecordHeader{{Key: []byte(events.HeaderSignature), Value: []byte(signer.Sign(b))}}
		}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// Lifecycle records carry the events' signature: a record without one,
// or signed with another key (someone with a broker login but not the
// signing key), is dead-lettered with its reason and never counted.
func TestLifecycleSinkRefusesForgedRecords(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	c := testenv.Kafka(t, 3)
	ctx := context.Background()
	if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), tasks.TopicLifecycle, kafka.TopicDeadLetters); err != nil {
		t.Fatal(err)
	}
	other, err := events.NewSigner([]byte("not-the-deployment-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	rec := func(id string) tasks.Lifecycle {
		return tasks.Lifecycle{TaskID: id, Queue: "default", Type: "demo:echo", Step: tasks.StepSucceeded, Attempt: 1, At: at}
	}
	produce(t, c, nil, []tasks.Lifecycle{rec("unsigned")})
	produce(t, c, other, []tasks.Lifecycle{rec("forged")})
	produce(t, c, testenv.Signer(t), []tasks.Lifecycle{rec("genuine")})
	sink := sinks.NewLifecycle(pool, c, testenv.Signer(t), testenv.Quiet())
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sink.Run(sctx) }()
	defer func() { cancel(); <-done }()

	var dls []kafka.DeadLetter
	deadline := time.Now().Add(20 * time.Second)
	for {
		dls, err = kafka.ReadDeadLetters(ctx, c, kafka.TopicDeadLetters)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM task_runs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if len(dls) == 2 && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters, %d tasks counted; want 2 and 1", len(dls), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, d := range dls {
		if d.Reason != kafka.ReasonBadSignature || d.Projection != sinks.LifecycleGroup || !strings.Contains(string(d.Body), "\"task_id\"") {
			t.Fatalf("dead letter %+v", d)
		}
	}
	var id string
	if err := pool.QueryRow(ctx, `SELECT task_id FROM task_runs`).Scan(&id); err != nil || id != "genuine" {
		t.Fatalf("counted %q (%v), want only the genuine record", id, err)
	}
}
