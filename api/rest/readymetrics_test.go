package rest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/process"
)

// cfgd_ready says per check what /readyz would: 1 when it answers in
// time, 0 when it fails or hangs past the timeout.
func TestReadyCollectorExportsEachCheck(t *testing.T) {
	c := rest.NewReadyCollector(50*time.Millisecond,
		process.Check{Name: "up", Ping: func(context.Context) error { return nil }},
		process.Check{Name: "down", Ping: func(context.Context) error { return errors.New("refused") }},
		process.Check{Name: "hung", Ping: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
	)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "cfgd_ready" {
			t.Fatalf("unexpected family %s", f.GetName())
		}
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"up": 1, "down": 0, "hung": 0}
	if len(got) != len(want) {
		t.Fatalf("cfgd_ready = %v, want %v", got, want)
	}
	for dep, v := range want {
		if got[dep] != v {
			t.Errorf("cfgd_ready{dependency=%q} = %v, want %v", dep, got[dep], v)
		}
	}
}
