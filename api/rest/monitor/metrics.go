package monitor

import "github.com/cfgd/cfgd/events/requestlog/ingestmetrics"

// WithMetrics makes the ingest endpoint count the events and calls it
// rejects in m; what the producer takes is counted by the producer
// (ingestmetrics.Metrics.Counting).
func (h *Handlers) WithMetrics(m *ingestmetrics.Metrics) *Handlers {
	h.metrics = m
	return h
}
