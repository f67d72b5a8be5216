package sinks

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
)

// metricValue reads one series of reg (label values in label-name order);
// ok is false when the series does not exist.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for i, l := range m.GetLabel() {
				if l.GetValue() != labels[i] {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// startMetered runs a request-log sink on conn recording into a fresh
// registry, which it returns.
func startMetered(t *testing.T, e *rlEnv, conn clickhouse.Conn) *prometheus.Registry {
	t.Helper()
	cfg := DefaultRequestLogConfig(e.bus)
	cfg.Group, cfg.BatchRows, cfg.BatchWait, cfg.MaxBackoff = "metered", 300, 50*time.Millisecond, 200*time.Millisecond
	s, err := NewRequestLogs(cfg, conn, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetMetrics(m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return reg
}

func waitMetric(t *testing.T, reg *prometheus.Registry, want float64, name string, labels ...string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		v, _ := metricValue(t, reg, name, labels...)
		if v >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v, waited for %v", name, labels, v, want)
		}
	}
}

// Every sink series exists at 0 before anything happened: the write
// histograms and error counters of each sink, its dead-letter reasons, and
// the consumer group's lag and readiness.
func TestSinkMetricsExistFromStart(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	bus := kafka.Config{Brokers: []string{"127.0.0.1:1"}, Partitions: 3, TopicPrefix: "t."}
	s, err := NewRequestLogs(DefaultRequestLogConfig(bus), nil, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetMetrics(m); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"cfgd_sink_batch_rows", []string{SinkUsage}},
		{"cfgd_sink_insert_seconds", []string{SinkLifecycle}},
		{"cfgd_sink_insert_errors_total", []string{SinkRequestLog}},
		{"cfgd_sink_deadletters_total", []string{kafka.ReasonUndecodable, SinkRequestLog}},
		{"cfgd_sink_deadletters_total", []string{kafka.ReasonBadSignature, SinkLifecycle}},
		{"cfgd_kafka_consumer_lag_records", []string{"cfgd.requestlog-clickhouse", "2", "t.requestlogs"}},
		{"cfgd_kafka_consumer_ready", []string{"cfgd.requestlog-clickhouse"}},
	} {
		if v, ok := metricValue(t, reg, c.name, c.labels...); !ok || v != 0 {
			t.Errorf("%s%v = %v (exists %v), want 0", c.name, c.labels, v, ok)
		}
	}
}

// Each insert is timed and its rows observed; poison records are counted
// by reason; inserts ClickHouse refuses are counted as insert errors.
func TestSinkMetricsCountWritesDeadLettersAndInsertErrors(t *testing.T) {
	t.Parallel()
	e := newRLEnv(t, 1)
	px := startProxy(t, e.opts.Addr[0])
	viaProxy := *e.opts
	viaProxy.Addr = []string{px.ln.Addr().String()}
	viaProxy.DialTimeout = time.Second
	viaProxy.ReadTimeout = 5 * time.Second
	conn, err := clickhouse.Open(&viaProxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	e.produce(100)
	raw, err := kafka.NewProducer(e.bus, kafka.ProducerOptions{}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	bad := requestlog.AppendBatch(nil, []requestlog.Event{{ServiceName: "", MethodName: "m", Status: "nope"}})
	for _, v := range [][]byte{[]byte("not a batch"), bad} {
		if err := raw.Send(context.Background(), &sarama.ProducerMessage{Topic: e.prod.Topic(), Value: sarama.ByteEncoder(v)}); err != nil {
			t.Fatal(err)
		}
	}
	reg := startMetered(t, e, conn)
	testenv.ExactRequestLogs(t, e.conn, 100)
	waitMetric(t, reg, 1, "cfgd_sink_deadletters_total", kafka.ReasonInvalid, SinkRequestLog)
	for _, reason := range []string{kafka.ReasonUndecodable, kafka.ReasonInvalid} {
		if v, _ := metricValue(t, reg, "cfgd_sink_deadletters_total", reason, SinkRequestLog); v != 1 {
			t.Errorf("dead letters %s: %v, want 1", reason, v)
		}
	}
	if v, _ := metricValue(t, reg, "cfgd_sink_insert_seconds", SinkRequestLog); v < 1 {
		t.Errorf("%v inserts timed, want at least 1", v)
	}
	if v, _ := metricValue(t, reg, "cfgd_sink_insert_errors_total", SinkRequestLog); v != 0 {
		t.Errorf("insert errors %v while ClickHouse was up", v)
	}

	px.setDown(true)
	e.produce(50)
	waitMetric(t, reg, 1, "cfgd_sink_insert_errors_total", SinkRequestLog)
	px.setDown(false)
	testenv.ExactRequestLogs(t, e.conn, 150)
}
