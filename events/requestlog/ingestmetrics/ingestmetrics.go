// Package ingestmetrics counts what the request-log ingest accepts and
// rejects, by way in (REST, gRPC, OTLP) and reason. It is its own package
// so that events/requestlog, which other servers build on (api/reporter),
// stays free of the Prometheus client.
package ingestmetrics

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/events/requestlog"
)

// Ways in: the transport label.
const (
	REST = "rest"
	GRPC = "grpc"
	OTLP = "otlp"
)

// Rejection reasons: the reason label.
const (
	// Invalid events failed validation (or, for OTLP, a server span could
	// not be mapped to an event); the others of their call may pass.
	Invalid = "invalid"
	// Malformed calls could not be read as events at all (not JSON, not
	// OTLP, too many events or bytes); counted once per call, since their
	// events are unknown.
	Malformed = "malformed"
	// Unavailable events were valid but the request-log topic did not
	// take them (Kafka down); the caller is told to retry.
	Unavailable = "unavailable"
)

var (
	transports = []string{REST, GRPC, OTLP}
	reasons    = []string{Invalid, Malformed, Unavailable}
)

// Metrics are the ingest counters. A nil *Metrics counts nothing.
type Metrics struct {
	accepted *prometheus.CounterVec
	rejected *prometheus.CounterVec
}

// New registers the counters in reg, every transport and reason at 0.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cfgd_ingest_accepted_events_total", Help: "Request-log events the ingest took to the request-log topic, by transport.",
		}, []string{"transport"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cfgd_ingest_rejected_events_total", Help: "Request-log events the ingest refused, by transport and reason (malformed: calls, whose events are unknown).",
		}, []string{"transport", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.accepted, m.rejected} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("ingest metrics: %w", err)
		}
	}
	for _, t := range transports {
		m.accepted.WithLabelValues(t)
		for _, r := range reasons {
			m.rejected.WithLabelValues(t, r)
		}
	}
	return m, nil
}

// Rejected counts n events (or one malformed call) of transport refused
// for reason.
func (m *Metrics) Rejected(transport, reason string, n int) {
	if m != nil && n > 0 {
		m.rejected.WithLabelValues(transport, reason).Add(float64(n))
	}
}

// Producer is what takes validated events to the request-log topic.
type Producer interface {
	Produce(ctx context.Context, events []requestlog.Event) error
}

// Counting wraps p so that the events it takes are counted as accepted
// for transport, and those it refuses with requestlog.ErrUnavailable as
// rejected (unavailable). With a nil m it returns p.
func (m *Metrics) Counting(p Producer, transport string) Producer {
	if m == nil || p == nil {
		return p
	}
	return counting{p: p, m: m, transport: transport}
}

type counting struct {
	p         Producer
	m         *Metrics
	transport string
}

func (c counting) Produce(ctx context.Context, events []requestlog.Event) error {
	err := c.p.Produce(ctx, events)
	switch {
	case err == nil:
		c.m.accepted.WithLabelValues(c.transport).Add(float64(len(events)))
	case errors.Is(err, requestlog.ErrUnavailable):
		c.m.Rejected(c.transport, Unavailable, len(events))
	}
	return err
}
