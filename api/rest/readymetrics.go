package rest

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/deploy/process"
)

var readyDesc = prometheus.NewDesc("cfgd_ready",
	"1 when a /readyz check answers within its timeout, 0 when it does not; cfgd is ready when every one is 1.",
	[]string{"dependency"}, nil)

// ReadyCollector exports the /readyz checks as cfgd_ready{dependency},
// run at each scrape (in parallel, within timeout), so an alert sees what
// /readyz would answer without a second prober.
type ReadyCollector struct {
	timeout time.Duration
	checks  []process.Check
}

// NewReadyCollector returns the collector over checks (the ones given to
// MountHealth).
func NewReadyCollector(timeout time.Duration, checks ...process.Check) *ReadyCollector {
	return &ReadyCollector{timeout: timeout, checks: checks}
}

// Describe implements prometheus.Collector.
func (c *ReadyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- readyDesc }

// Collect implements prometheus.Collector.
func (c *ReadyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range runChecks(context.Background(), c.timeout, c.checks) {
		v := 0.0
		if r.OK {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, v, r.Name)
	}
}
