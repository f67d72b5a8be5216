package sinks

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
)

// Sink names: the sink label of the sink metrics.
const (
	SinkRequestLog = "requestlog-clickhouse"
	SinkUsage      = "apikey-usage"
	SinkLifecycle  = "tasks-lifecycle"
)

// sinkNames and deadLetterReasons are every label value the metrics take,
// created at 0 so each series exists before its first event.
var (
	sinkNames         = []string{SinkRequestLog, SinkUsage, SinkLifecycle}
	deadLetterReasons = map[string][]string{
		SinkRequestLog: {kafka.ReasonUndecodable, kafka.ReasonInvalid},
		SinkLifecycle:  {kafka.ReasonBadSignature},
	}
)

// Metrics are the sinks' batch, insert and dead-letter metrics, shared by
// every sink of the process. A nil *Metrics records nothing (tests,
// benchmarks, replay).
type Metrics struct {
	reg         prometheus.Registerer
	rows        *prometheus.HistogramVec
	seconds     *prometheus.HistogramVec
	errors      *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
}

// NewMetrics registers the sink metrics in reg; the sinks given them
// (SetMetrics) also register their consumer-group metrics there
// (cfgd_kafka_consumer_*).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reg: reg,
		rows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cfgd_sink_batch_rows", Help: "Rows (events) one sink write carries.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}, []string{"sink"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cfgd_sink_insert_seconds", Help: "Time one sink write takes (ClickHouse insert, Postgres transaction), failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"sink"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cfgd_sink_insert_errors_total", Help: "Sink writes that failed (each is retried); for requestlog-clickhouse these are ClickHouse insert errors.",
		}, []string{"sink"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cfgd_sink_deadletters_total", Help: "Records a sink sent to its dead-letter topic, by reason.",
		}, []string{"sink", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.rows, m.seconds, m.errors, m.deadLetters} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("sink metrics: %w", err)
		}
	}
	for _, s := range sinkNames {
		m.rows.WithLabelValues(s)
		m.seconds.WithLabelValues(s)
		m.errors.WithLabelValues(s)
		for _, r := range deadLetterReasons[s] {
			m.deadLetters.WithLabelValues(s, r)
		}
	}
	return m, nil
}

// registerer is where the sink's consumer registers its metrics (nil:
// none).
func (m *Metrics) registerer() prometheus.Registerer {
	if m == nil {
		return nil
	}
	return m.reg
}

// write runs one write of rows rows for sink, timing and counting it.
func (m *Metrics) write(sink string, rows int, fn func() error) error {
	start := time.Now()
	err := fn()
	if m == nil {
		return err
	}
	m.rows.WithLabelValues(sink).Observe(float64(rows))
	m.seconds.WithLabelValues(sink).Observe(time.Since(start).Seconds())
	if err != nil {
		m.errors.WithLabelValues(sink).Inc()
	}
	return err
}

// deadLettered counts one record sent to the dead-letter topic.
func (m *Metrics) deadLettered(sink, reason string) {
	if m != nil {
		m.deadLetters.WithLabelValues(sink, reason).Inc()
	}
}

// consumer creates the sink's consumer-group metrics at once: the sink
// may wait for its store before it starts consuming.
func (m *Metrics) consumer(c kafka.Config, group, topic string) error {
	if m == nil {
		return nil
	}
	return kafka.InitConsumerMetrics(m.reg, c, group, topic)
}

// SetMetrics makes the sink record its metrics in m (nil: none); call it
// before Run.
func (s *RequestLogs) SetMetrics(m *Metrics) error {
	s.metrics = m
	return m.consumer(s.cfg.Bus, s.cfg.Group, kafka.TopicRequestLogs)
}

// SetMetrics makes the consumer record its metrics in m (nil: none); call
// it before Run.
func (u *Usage) SetMetrics(m *Metrics) error {
	u.metrics = m
	return m.consumer(u.cfg.Bus, u.cfg.Group, kafka.TopicRequestLogs)
}

// SetMetrics makes the sink record its metrics in m (nil: none); call it
// before Run.
func (s *Lifecycle) SetMetrics(m *Metrics) error {
	s.metrics = m
	return m.consumer(s.bus, LifecycleGroup, tasks.TopicLifecycle)
}
