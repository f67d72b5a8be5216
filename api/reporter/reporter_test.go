package reporter_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cfgd/cfgd/api/reporter"
	"github.com/cfgd/cfgd/events/requestlog"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// hangAddr accepts connections and never answers: a cfgd that is up but
// stuck.
func hangAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	return ln.Addr().String()
}

// serve starts a gRPC server (the health service) with rep's interceptors
// and returns a client of it.
func serve(t *testing.T, rep *reporter.Reporter) healthpb.HealthClient {
	t.Helper()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(rep.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(rep.StreamServerInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// When cfgd is down or stuck, the wrapped calls still succeed at once and
// their events are dropped and counted, never queued without bound.
func TestUnreachableCfgdDropsInsteadOfBlocking(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
	}{
		{"nothing listening", deadAddr},
		{"never answers", hangAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := grpc.NewClient(tc.addr(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			const calls, queue = 300, 50
			rep, err := reporter.New(conn, reporter.Config{APIKey: "k", Batch: requestlog.BatcherConfig{
				QueueSize: queue, BatchSize: 10, FlushInterval: 10 * time.Millisecond, SendTimeout: 200 * time.Millisecond,
			}}, quiet())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- rep.Run(ctx) }()
			client := serve(t, rep)
			start := time.Now()
			for range calls {
				if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
					t.Fatalf("wrapped call failed: %v", err)
				}
			}
			// One streaming call too.
			w, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recv(); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if took > 1500*time.Millisecond {
				t.Fatalf("%d wrapped calls took %s with cfgd unreachable", calls, took)
			}
			t.Logf("%d calls in %s", calls, took.Round(time.Millisecond))
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// Every finished call was either dropped or (impossible here)
			// sent; the stream is still open, so not reported yet.
			if rep.Sent() != 0 || rep.Dropped() != calls {
				t.Fatalf("sent %d dropped %d, want 0 and %d", rep.Sent(), rep.Dropped(), calls)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, tc := range []struct {
		name string
		cfg  reporter.Config
		ok   bool
	}{
		{"defaults", reporter.Config{APIKey: "k"}, true},
		{"no key", reporter.Config{}, false},
		{"bad batch", reporter.Config{APIKey: "k", Batch: requestlog.BatcherConfig{QueueSize: 1}}, false},
	} {
		if _, err := reporter.New(conn, tc.cfg, quiet()); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
