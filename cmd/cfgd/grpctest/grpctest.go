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
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cfgd/cfgd/projections/projectors"

	"github.com/cfgd/cfgd/cmd/cfgd/modules"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/api/protos"
	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/sinks"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// Logs is a goroutine-safe log requestlog.
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
	GRPC     *grpcserver.Server
	GRPCAddr string
	Conn     *grpc.ClientConn
	Keys     *apikeyview.Keys
	Protos   *protos.Dir
	Create   *apikeys.CreateHandler
	Revoke   *apikeys.RevokeHandler
	Logs     *Logs
	// StopGRPC stops the gRPC server early (it stops with the test anyway).
	StopGRPC func()
	// With Options.RequestLog: the reporter of served calls, the producer
	// and the read model over the test's ClickHouse database.
	Reporter *requestlog.Batcher
	Producer *requestlogkafka.Producer
	Requests *requestlogview.Store
}

// Options of Start.
type Options struct {
	// RequestLog adds the request log: a producer on the test's broker,
	// the ClickHouse sink into a fresh database, the reporting of served
	// calls, cfgd.ingest.v1 and the monitor statistics.
	RequestLog bool
	// KafkaDown points the request-log producer at a dead broker (with
	// RequestLog), for the Unavailable path.
	KafkaDown bool
	// Usage takes the requests API keys authenticate (authtest.Options).
	Usage signin.Usage
	// CredentialCheck is how often open streams' credentials are checked
	// again (0: the default).
	CredentialCheck time.Duration
}

// Start brings the stack up for t.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith brings the stack up for t with o.
func StartWith(t testing.TB, o Options) *Env {
	t.Helper()
	a := authtest.Start(t, authtest.Options{NoPipeline: true, Usage: o.Usage, Config: func(c *signin.Config) { c.APIKeyCacheTTL = 200 * time.Millisecond }})
	logs := &Logs{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	kafka := testenv.Kafka(t, 3)
	var rl modules.GRPCRequestLog
	var prod *requestlogkafka.Producer
	var store *requestlogview.Store
	if o.RequestLog {
		prod, store = requestLog(t, kafka, o.KafkaDown)
		rl = modules.GRPCRequestLog{Producer: prod, Queries: store, Idempotency: requestlogview.NewIdempotency(a.Pool, time.Now, 10*time.Second)}
	}
	report := requestlog.DefaultBatcherConfig()
	report.FlushInterval = 20 * time.Millisecond
	parts, err := modules.GRPC(modules.GRPCConfig{
		RPC:      grpcserver.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second, Limits: grpcserver.Limits{CredentialCheck: o.CredentialCheck}},
		ProtoDir: t.TempDir(),
		// A consumer group's first join can take seconds on a loaded
		// machine; the tests are about answers, not that latency.
		ReadWait: 30 * time.Second,
		Report:   report,
	}, a.API, a.Pool, log, a.Clock.Now, rl)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := events.NewRegistry(append(identity.Events(), apikey.Events()...)...)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Pipeline(t, a.Pool, nil, kafka, reg, append(projectors.Identity(), parts.Module.Projections...)...)

	srv := parts.Server
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- parts.Module.Servers[0].Run(ctx) }()
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

	router, err := rest.NewRouter(log, prometheus.NewRegistry())
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
		Reporter: parts.Reporter, Producer: prod, Requests: store,
	}
}

// NewKey creates a key for the user with address email (who must exist)
// and waits until the read model has it.
func (e *Env) NewKey(t testing.TB, name, typ, email string, expires *time.Time) apikeys.Created {
	t.Helper()
	c, err := e.Create.Handle(context.Background(), apikeys.Create{Name: name, KeyType: typ, UserEmail: email, ExpiresAt: expires, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	e.WaitProjected(t, projectors.KeysName, apikey.Stream(c.State.ID))
	return c
}

// requestLog starts the request-log path on broker c: the ClickHouse sink
// into a fresh database and a producer (on a dead broker when down).
func requestLog(t testing.TB, c kafka.Config, down bool) (*requestlogkafka.Producer, *requestlogview.Store) {
	t.Helper()
	_, conn := testenv.ClickHouseMigrated(t)
	sc := sinks.DefaultRequestLogConfig(c)
	sc.BatchWait = 20 * time.Millisecond
	s, err := sinks.NewRequestLogs(sc, conn, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	run(t, s.Run)
	deadline := time.Now().Add(60 * time.Second)
	for s.Ready(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("request-log sink not ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	pc := requestlogkafka.DefaultProducerConfig(c)
	if down {
		dead := c
		dead.Brokers = []string{deadAddr(t)}
		pc.Bus = dead
	} else {
		// The first produce creates the topic; on a loaded machine that
		// can take longer than the serving default of one second.
		pc.Timeout = 10 * time.Second
	}
	p, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, requestlogview.New(conn, time.Now, func(context.Context) (int64, error) { return 0, nil })
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// run runs f until the test ends.
func run(t testing.TB, f func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
