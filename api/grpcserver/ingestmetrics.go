package grpcserver

import "github.com/cfgd/cfgd/events/requestlog/ingestmetrics"

// WithMetrics makes Report count the events and messages it rejects in
// m; what the producer takes is counted by the producer
// (ingestmetrics.Metrics.Counting).
func (s *Ingest) WithMetrics(m *ingestmetrics.Metrics) *Ingest {
	s.metrics = m
	return s
}
