// Package grpctest starts cfgd's gRPC monitoring feature for component
// tests: the sign-in stack of authtest (real Postgres, Redis, embedded
// Kafka with the relay and the identity and API key projections), the
// REST endpoints of api/grpc on an httptest server, and the real gRPC
// server on a loopback port with a client connection to it. Every log
// line of both servers is kept, so tests can search them.
package grpctest

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cfgd/cfgd/api"
	"github.com/cfgd/cfgd/api/auth/authtest"
	apigrpc "github.com/cfgd/cfgd/api/grpc"
	"github.com/cfgd/cfgd/api/protos"
	"github.com/cfgd/cfgd/api/rpc"
	"github.com/cfgd/cfgd/commands/apikey"
	"github.com/cfgd/cfgd/commands/signin"
	"github.com/cfgd/cfgd/deploy/testenv"
	"github.com/cfgd/cfgd/events"
	eventsapikey "github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/identity"
	projapikey "github.com/cfgd/cfgd/projections/apikey"
	identityproj "github.com/cfgd/cfgd/projections/identity"
	rmapikey "github.com/cfgd/cfgd/readmodels/apikey"
)

// Logs is a goroutine-safe log sink.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String is everything logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Env is one running stack.
type Env struct {
	*authtest.Env
	GRPC     *rpc.Server
	GRPCAddr string
	Conn     *grpc.ClientConn
	Keys     *rmapikey.Keys
	Protos   *protos.Dir
	Create   *apikey.CreateHandler
	Revoke   *apikey.RevokeHandler
	Logs     *Logs
	// StopGRPC stops the gRPC server early (it stops with the test anyway).
	StopGRPC func()
}

// Start brings the stack up for t.
func Start(t testing.TB) *Env {
	t.Helper()
	a := authtest.Start(t, authtest.Options{NoPipeline: true, Config: func(c *signin.Config) { c.APIKeyCacheTTL = 200 * time.Millisecond }})
	logs := &Logs{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	parts, err := apigrpc.NewModule(apigrpc.Config{
		RPC: rpc.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}, ProtoDir: t.TempDir(),
		// A consumer group's first join can take seconds on a loaded
		// machine; the tests are about answers, not that latency.
		ReadWait: 30 * time.Second,
	}, a.API, a.Pool, log, a.Clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := events.NewRegistry(append(identity.Events(), eventsapikey.Events()...)...)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Pipeline(t, a.Pool, nil, testenv.Kafka(t, 3), reg, append(identityproj.All(), parts.Module.Projections...)...)

	srv := parts.Server
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var addr string
	select {
	case addr = <-srv.Started():
	case err := <-done:
		cancel()
		t.Fatalf("grpc server: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("grpc server: %v", err)
			}
		})
	}
	t.Cleanup(stop)

	router, err := api.NewRouter(log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a.API.Mount(router)
	if err := parts.Module.Routes(router); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(router)
	t.Cleanup(hs.Close)
	ae := *a
	ae.URL, ae.Server = hs.URL, hs

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &Env{
		Env: &ae, GRPC: srv, GRPCAddr: addr, Conn: conn, Keys: parts.Keys, Protos: parts.Protos,
		Create: parts.Create, Revoke: parts.Revoke, Logs: logs, StopGRPC: stop,
	}
}

// NewKey creates a key for the user with address email (who must exist)
// and waits until the read model has it.
func (e *Env) NewKey(t testing.TB, name, typ, email string, expires *time.Time) apikey.Created {
	t.Helper()
	c, err := e.Create.Handle(context.Background(), apikey.Create{Name: name, KeyType: typ, UserEmail: email, ExpiresAt: expires, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	e.WaitProjected(t, projapikey.Name, eventsapikey.Stream(c.State.ID))
	return c
}
