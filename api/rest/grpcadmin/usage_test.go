package grpcadmin_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/sinks"
)

// The request log feeds request_count and last_used_at of the keys, and so
// the detail and the stats endpoints.
func TestAPIKeyUsageComesFromTheRequestLog(t *testing.T) {
	t.Parallel()
	e, admin, hdr := adminEnv(t)
	a := e.NewKey(t, "used", apikey.TypeService, admin, nil)
	b := e.NewKey(t, "unused", apikey.TypeCLI, admin, nil)

	kc := testenv.Kafka(t, 2)
	pc := requestlogkafka.DefaultProducerConfig(kc)
	pc.Timeout = 10 * time.Second
	prod, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prod.Close() })
	newest := time.Date(2026, 11, 2, 8, 30, 0, 0, time.UTC)
	ev := func(key int64, at time.Time) requestlog.Event {
		return requestlog.Event{ServiceName: "svc", MethodName: "M", Status: requestlog.StatusSuccess, CreatedAt: at, APIKeyID: key}
	}
	if err := prod.Produce(context.Background(), []requestlog.Event{
		ev(a.State.ID, newest.Add(-time.Hour)), ev(a.State.ID, newest), ev(0, newest.Add(time.Hour)), ev(a.State.ID, newest.Add(-time.Minute)),
	}); err != nil {
		t.Fatal(err)
	}

	cfg := sinks.DefaultUsageConfig(kc)
	cfg.BatchWait = 50 * time.Millisecond
	u, err := sinks.NewUsage(cfg, e.Pool, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("usage consumer: %v", err)
		}
	})

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
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["last_used_at"])); err != nil || !at.Equal(newest) {
		t.Fatalf("last_used_at %v, want %v", got["last_used_at"], newest)
	}
	if other := detail(b.State.ID); other["request_count"] != 0.0 || other["last_used_at"] != nil {
		t.Fatalf("unused key: %v", other)
	}
	r := e.Do(t, http.MethodGet, "/api/grpc/api-keys/stats/", nil, hdr...)
	if r.Status != http.StatusOK || r.Body["total_requests"] != 3.0 {
		t.Fatalf("stats: %d %s", r.Status, r.Raw)
	}
}
