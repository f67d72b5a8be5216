package grpcadmin_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/api/rest/grpcadmin"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/projections/sinks"
)

// A key's request_count and last_used_at count the requests the key
// authenticated, HTTP and gRPC, at server time, as the detail and the
// stats endpoints show; a refused key and an unused one count nothing.
func TestAPIKeyUsageCountsAuthenticatedRequests(t *testing.T) {
	t.Parallel()
	kc := testenv.Kafka(t, 2)
	rc := apikey.DefaultUsageRecorderConfig(kc)
	rc.FlushEvery = 20 * time.Millisecond
	rec, err := apikey.NewUsageRecorder(rc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	e := grpctest.StartWith(t, grpctest.Options{Usage: rec})
	admin := authtest.Email("admin")
	e.Superuser(t, admin, password)
	hdr := basic(admin, password)
	a := e.NewKey(t, "used", apikey.TypeService, admin, nil)
	b := e.NewKey(t, "unused", apikey.TypeCLI, admin, nil)
	revoked := e.NewKey(t, "revoked", apikey.TypeCLI, admin, nil)
	if _, err := e.Revoke.Handle(context.Background(), revoke(revoked.State.ID)); err != nil {
		t.Fatal(err)
	}
	e.WaitProjected(t, "apikey.keys", apikey.Stream(revoked.State.ID))

	ctx, cancel := context.WithCancel(context.Background())
	runs := make(chan error, 2)
	go func() { runs <- rec.Run(ctx) }()
	cfg := sinks.DefaultUsageConfig(kc)
	cfg.BatchWait = 50 * time.Millisecond
	u, err := sinks.NewUsage(cfg, e.Pool, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	go func() { runs <- u.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-runs; err != nil {
				t.Errorf("usage: %v", err)
			}
		}
	})

	// The server's clock is two days ahead: last_used_at is its time.
	e.Clock.Advance(48 * time.Hour)
	served := e.Clock.Now()
	for _, key := range []string{a.Key, a.Key, revoked.Key} {
		r := e.Do(t, http.MethodGet, grpcadmin.PathProtoFiles, nil, "X-API-Key", key)
		if want := map[bool]int{true: http.StatusOK, false: http.StatusUnauthorized}[key == a.Key]; r.Status != want {
			t.Fatalf("proto files with a key: %d, want %d: %s", r.Status, want, r.Raw)
		}
	}
	if _, err := monitorv1.NewMonitorServiceClient(e.Conn).Health(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", a.Key),
		&monitorv1.HealthRequest{}); err != nil {
		t.Fatalf("gRPC call with the key: %v", err)
	}

	detail := func(id int64) map[string]any {
		r := e.Do(t, http.MethodGet, fmt.Sprintf("/api/grpc/api-keys/%d/", id), nil, hdr...)
		if r.Status != http.StatusOK {
			t.Fatalf("detail %d: %d %s", id, r.Status, r.Raw)
		}
		return r.Body
	}
	deadline := time.Now().Add(60 * time.Second)
	for detail(a.State.ID)["request_count"] != 3.0 {
		if time.Now().After(deadline) {
			t.Fatalf("request_count never reached 3: %v", detail(a.State.ID))
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := detail(a.State.ID)
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["last_used_at"])); err != nil || at.Before(served.Add(-time.Microsecond)) || at.After(e.Clock.Now()) {
		t.Fatalf("last_used_at %v, want the server's time, from %v", got["last_used_at"], served)
	}
	for _, id := range []int64{b.State.ID, revoked.State.ID} {
		if other := detail(id); other["request_count"] != 0.0 || other["last_used_at"] != nil {
			t.Fatalf("key %d: %v", id, other)
		}
	}
	r := e.Do(t, http.MethodGet, "/api/grpc/api-keys/stats/", nil, hdr...)
	if r.Status != http.StatusOK || r.Body["total_requests"] != 3.0 {
		t.Fatalf("stats: %d %s", r.Status, r.Raw)
	}
}
