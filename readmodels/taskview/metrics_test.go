package taskview_test

import (
	"testing"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// Every configured queue is exported, at 0 before asynq knows it; a
// task enqueued shows in its queue's size and pending count; a Redis that
// does not answer shows as cfgd_task_queues_reachable 0.
func TestQueueCollectorExportsEveryConfiguredQueue(t *testing.T) {
	t.Parallel()
	rdb, _ := testenv.RedisDB(t, authtest.RedisURL())
	c := taskview.NewQueueCollector(asynq.NewInspectorFromRedisClient(rdb), []string{"busy", "idle"}, testenv.Quiet())

	client := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { _ = client.Close() })
	if _, err := client.Enqueue(asynq.NewTask("metrics:test", nil), asynq.Queue("busy")); err != nil {
		t.Fatal(err)
	}
	got := gather(t, c)
	for series, want := range map[string]float64{
		`cfgd_task_queues_reachable`:                          1,
		`cfgd_task_queue_size{queue="busy"}`:                  1,
		`cfgd_task_queue_tasks{queue="busy",state="pending"}`: 1,
		`cfgd_task_queue_size{queue="idle"}`:                  0,
		`cfgd_task_queue_tasks{queue="idle",state="pending"}`: 0,
		`cfgd_task_queue_paused{queue="idle"}`:                0,
		`cfgd_tasks_processed_total{queue="idle"}`:            0,
		`cfgd_tasks_failed_total{queue="busy"}`:               0,
	} {
		v, ok := got[series]
		if !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	if len(got) != 25 {
		t.Errorf("%d series, want 25 (7 states, size, latency, paused, processed, failed per queue, and reachable): %v", len(got), got)
	}

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = down.Close() })
	dc := taskview.NewQueueCollector(asynq.NewInspectorFromRedisClient(down), []string{"busy"}, testenv.Quiet())
	if got := gather(t, dc); len(got) != 1 || got["cfgd_task_queues_reachable"] != 0 {
		t.Fatalf("with Redis down: %v, want only cfgd_task_queues_reachable 0", got)
	}
}

// gather collects c into series name{label="value",...} -> value.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			if len(m.GetLabel()) > 0 {
				name += "{"
				for i, l := range m.GetLabel() {
					if i > 0 {
						name += ","
					}
					name += l.GetName() + `="` + l.GetValue() + `"`
				}
				name += "}"
			}
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			out[name] = v
		}
	}
	return out
}
