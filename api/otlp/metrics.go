package otlp

import "github.com/cfgd/cfgd/events/requestlog/ingestmetrics"

// WithMetrics makes the receiver count the spans and exports it rejects
// in m; what the producer takes is counted by the producer
// (ingestmetrics.Metrics.Counting).
func (r *Receiver) WithMetrics(m *ingestmetrics.Metrics) *Receiver {
	r.metrics = m
	return r
}
