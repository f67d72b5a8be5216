package taskview

import (
	"context"
	"log/slog"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// The queue metrics, read from asynq at each scrape. They follow what
// asynq's own x/metrics collector exports, with cfgd names and two
// differences: only the configured queues (a bounded label), each from 0
// before asynq knows it, and a failed read is logged through cfgd's
// logger and shows as cfgd_task_queues_reachable 0 instead of a gap.
var (
	queueTasksDesc = prometheus.NewDesc("cfgd_task_queue_tasks",
		"Tasks in a configured asynq queue, by state.", []string{"queue", "state"}, nil)
	queueSizeDesc = prometheus.NewDesc("cfgd_task_queue_size",
		"Tasks in a configured asynq queue (pending, active, scheduled, retry, aggregating, archived).", []string{"queue"}, nil)
	queueLatencyDesc = prometheus.NewDesc("cfgd_task_queue_latency_seconds",
		"How long the oldest pending task of a queue has waited.", []string{"queue"}, nil)
	queuePausedDesc = prometheus.NewDesc("cfgd_task_queue_paused",
		"1 while asynq holds a queue paused.", []string{"queue"}, nil)
	tasksProcessedDesc = prometheus.NewDesc("cfgd_tasks_processed_total",
		"Tasks of a queue the workers processed, succeeded or failed (asynq's cumulative count).", []string{"queue"}, nil)
	tasksFailedDesc = prometheus.NewDesc("cfgd_tasks_failed_total",
		"Tasks of a queue whose handler failed (asynq's cumulative count).", []string{"queue"}, nil)
	queuesReachableDesc = prometheus.NewDesc("cfgd_task_queues_reachable",
		"1 when the last scrape read the queues from Redis, 0 when it could not.", nil, nil)
)

// QueueCollector exports the configured queues' sizes and task counts.
type QueueCollector struct {
	insp   Inspector
	queues []string
	log    *slog.Logger
}

// NewQueueCollector returns the collector over queues; register it once.
func NewQueueCollector(insp Inspector, queues []string, log *slog.Logger) *QueueCollector {
	return &QueueCollector{insp: insp, queues: queues, log: log}
}

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queueTasksDesc, queueSizeDesc, queueLatencyDesc, queuePausedDesc,
		tasksProcessedDesc, tasksFailedDesc, queuesReachableDesc} {
		ch <- d
	}
}

type queueNumbers struct {
	states                          [7]int
	size, processed, failed, paused int
	latencySeconds                  float64
}

var queueStates = [7]string{"pending", "active", "scheduled", "retry", "aggregating", "archived", "completed"}

// Collect implements prometheus.Collector. asynq answers only about
// queues something was enqueued on; the others are all zeros.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	nums, err := c.read()
	reachable := 1.0
	if err != nil {
		reachable = 0
		c.log.WarnContext(context.Background(), "task queue metrics", "err", err)
	}
	ch <- prometheus.MustNewConstMetric(queuesReachableDesc, prometheus.GaugeValue, reachable)
	if err != nil {
		return
	}
	for _, q := range c.queues {
		n := nums[q]
		for i, s := range queueStates {
			ch <- prometheus.MustNewConstMetric(queueTasksDesc, prometheus.GaugeValue, float64(n.states[i]), q, s)
		}
		ch <- prometheus.MustNewConstMetric(queueSizeDesc, prometheus.GaugeValue, float64(n.size), q)
		ch <- prometheus.MustNewConstMetric(queueLatencyDesc, prometheus.GaugeValue, n.latencySeconds, q)
		ch <- prometheus.MustNewConstMetric(queuePausedDesc, prometheus.GaugeValue, float64(n.paused), q)
		ch <- prometheus.MustNewConstMetric(tasksProcessedDesc, prometheus.CounterValue, float64(n.processed), q)
		ch <- prometheus.MustNewConstMetric(tasksFailedDesc, prometheus.CounterValue, float64(n.failed), q)
	}
}

func (c *QueueCollector) read() (map[string]queueNumbers, error) {
	known, err := c.insp.Queues()
	if err != nil {
		return nil, err
	}
	out := make(map[string]queueNumbers, len(c.queues))
	for _, q := range c.queues {
		if !slices.Contains(known, q) {
			continue
		}
		info, err := c.insp.GetQueueInfo(q)
		if err != nil {
			return nil, err
		}
		n := queueNumbers{
			states:    [7]int{info.Pending, info.Active, info.Scheduled, info.Retry, info.Aggregating, info.Archived, info.Completed},
			size:      info.Size,
			processed: info.ProcessedTotal, failed: info.FailedTotal, latencySeconds: info.Latency.Seconds(),
		}
		if info.Paused {
			n.paused = 1
		}
		out[q] = n
	}
	return out, nil
}
