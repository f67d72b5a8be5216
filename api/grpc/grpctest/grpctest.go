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
	apikeysv1 "github.com/cfgd/cfgd/api/protos/cfgd/apikeys/v1"
	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/api/rpc"
	"github.com/cfgd/cfgd/commands/apikey"
	"github.com/cfgd/cfgd/deploy/testenv"
	"github.com/cfgd/cfgd/events"
	eventsapikey "github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/identity"
	projapikey "github.com/cfgd/cfgd/projections/apikey"
	identityproj "github.com/cfgd/cfgd/projections/identity"
	rmapikey "github.com/cfgd/cfgd/readmodels/apikey"
	rmidentity "github.com/cfgd/cfgd/readmodels/identity"
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
	KeyAuth  *rmapikey.Authenticator
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
	a := authtest.Start(t, authtest.Options{NoPipeline: true})
	reg, err := events.NewRegistry(append(identity.Events(), eventsapikey.Events()...)...)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Pipeline(t, a.Pool, nil, testenv.Kafka(t, 3), reg, append(identityproj.All(), projapikey.All()...)...)

	logs := &Logs{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	keys := rmapikey.NewKeys(a.Pool, a.Clock.Now)
	keyAuth, err := rmapikey.NewAuthenticator(a.Pool, rmapikey.Config{CacheTTL: 200 * time.Millisecond, Now: a.Clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	revocations := rmidentity.NewRevocations(a.Pool, a.Settings.JWT.RevocationPoll, a.Settings.JWT.AccessTTL, a.Clock.Now)
	authn := rpc.NewStoreAuthenticator(keyAuth, a.API.Tokens(), revocations, a.API.Users())
	srv, err := rpc.New(rpc.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}, log, authn)
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(&apikeysv1.APIKeyService_ServiceDesc, rpc.NewAPIKeys(keys, log))
	srv.Register(&monitorv1.MonitorService_ServiceDesc, rpc.NewMonitor(srv.Status))
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

	dir, err := protos.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if res := dir.Generate(nil, false); len(res.Errors) > 0 {
		t.Fatalf("generate protos: %+v", res.Errors)
	}
	create := apikey.NewCreateHandler(a.Pool, a.Clock.Now)
	revoke := apikey.NewRevokeHandler(a.Pool, a.Clock.Now)
	router, err := api.NewRouter(log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a.API.Mount(router)
	err = apigrpc.Mount(router, apigrpc.Deps{
		Staff: a.API.Staff(), Pool: a.Pool, Keys: keys, KeyAuth: keyAuth, Create: create, Revoke: revoke,
		Health: func() apigrpc.Health {
			st := srv.Status()
			return apigrpc.Health{Running: st.Running, Uptime: st.Uptime, Services: st.Services}
		},
		Protos: dir,
		// A consumer group's first join can take seconds on a loaded
		// machine; the tests are about answers, not that latency.
		ReadWait: 30 * time.Second,
	})
	if err != nil {
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
		Env: &ae, GRPC: srv, GRPCAddr: addr, Conn: conn, Keys: keys, KeyAuth: keyAuth, Protos: dir,
		Create: create, Revoke: revoke, Logs: logs, StopGRPC: stop,
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
