package grpcserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cfgd/cfgd/api/grpcserver"
	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
)

// A served call shows up in /metrics (the registry cfgd serves there) with
// its service, method and the code the caller got, refused calls included.
func TestCallsShowUpInMetrics(t *testing.T) {
	t.Parallel()
	srv, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}, slogTo(&grpctest.Logs{}), anyone{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(&monitorv1.MonitorService_ServiceDesc, grpcserver.NewMonitor(srv.Status))
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.Metrics())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	conn, err := grpc.NewClient(<-srv.Started(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	mon := monitorv1.NewMonitorServiceClient(conn)
	if _, err := mon.Health(withKey("x"), &monitorv1.HealthRequest{}); err != nil {
		t.Fatal(err)
	}
	// Without credentials: refused by authentication, counted all the same.
	if _, err := mon.Health(context.Background(), &monitorv1.HealthRequest{}); err == nil {
		t.Fatal("a call without credentials was served")
	}

	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := w.Body.String()
	for _, want := range []string{
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Check",grpc_service="grpc.health.v1.Health",grpc_type="unary"} 1`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Health",grpc_service="cfgd.monitor.v1.MonitorService",grpc_type="unary"} 1`,
		`grpc_server_handled_total{grpc_code="Unauthenticated",grpc_method="Health",grpc_service="cfgd.monitor.v1.MonitorService",grpc_type="unary"} 1`,
		`grpc_server_started_total{grpc_method="Health",grpc_service="cfgd.monitor.v1.MonitorService",grpc_type="unary"} 2`,
		// Registered methods start at zero before their first call.
		`grpc_server_started_total{grpc_method="Overview",grpc_service="cfgd.monitor.v1.MonitorService",grpc_type="unary"} 0`,
		`grpc_server_handling_seconds_count{grpc_method="Health",grpc_service="cfgd.monitor.v1.MonitorService",grpc_type="unary"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}
