package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// serve runs the gRPC server next to HTTP and stops it with them.
func TestServeRunsGRPC(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	r := start(t)
	re := regexp.MustCompile(`"msg":"grpc server listening","addr":"([^"]+)"`)
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(r.stderr.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("no grpc address in the log:\n%s", r.stderr)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "cfgd.apikeys.v1.APIKeyService"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v", h, err)
	}
	// A method the server does not have is answered Unimplemented by
	// grpc-go before any interceptor (cfgd sets no unknown-service
	// handler), so the names a client invents never become labels.
	invented := strings.Repeat("Invented", 1000)
	for _, method := range []string{"/" + invented + ".Service/Call", "/grpc.health.v1.Health/" + invented} {
		err := conn.Invoke(ctx, method, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%.40s...: %v, want Unimplemented", method, err)
		}
	}
	// The call is counted on cfgd's registry, served at /metrics.
	want := `grpc_server_handled_total{grpc_code="OK",grpc_method="Check",grpc_service="grpc.health.v1.Health",grpc_type="unary"} 1`
	code, body := get(t, r.base+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("/metrics: %d, want a line %s in:\n%s", code, want, body)
	}
	if strings.Contains(body, "Invented") {
		t.Error("/metrics holds a method name the client invented")
	}
	r.stop(t)
	if !strings.Contains(r.stderr.String(), `"msg":"grpc server stopped"`) {
		t.Errorf("no grpc stop in the log:\n%s", r.stderr)
	}
}
