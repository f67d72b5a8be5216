package grpcserver_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cfgd/cfgd/api/grpcserver"
	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/projections/projectors"
)

// An open stream whose credentials stop being valid ends with
// Unauthenticated within the credential check (5s by default), even
// while its handler waits for the client's next message: a revoked key,
// an expired key, a signed-out session.
func TestOpenStreamEndsWhenCredentialsGo(t *testing.T) {
	t.Parallel()
	e := grpctest.StartWith(t, grpctest.Options{RequestLog: true})
	admin := authtest.Email("stream-admin")
	e.Superuser(t, admin, "admin password 1")
	ingest := ingestv1.NewIngestServiceClient(e.Conn)
	exp := e.Clock.Now().Add(time.Hour)
	revoked := e.NewKey(t, "revoked", apikey.TypeService, admin, nil)
	expiring := e.NewKey(t, "expiring", apikey.TypeService, admin, &exp)
	kept := e.NewKey(t, "kept", apikey.TypeService, admin, nil)
	staff := e.SignIn(t, admin)

	open := func(ctx context.Context) grpc.ClientStreamingClient[ingestv1.ReportRequest, ingestv1.ReportResponse] {
		t.Helper()
		// A stream the server never ends fails here, not by hanging.
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t.Cleanup(cancel)
		s, err := ingest.Report(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// One message through: the stream is authenticated and serving.
		if err := s.Send(&ingestv1.ReportRequest{}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	revokedStream, expiringStream, sessionStream, keptStream := open(withKey(revoked.Key)), open(withKey(expiring.Key)), open(withBearer(staff.Access)), open(withKey(kept.Key))

	start := time.Now()
	if _, err := e.Revoke.Handle(context.Background(), apikeys.Revoke{ID: revoked.State.ID, RevokedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	e.WaitProjected(t, projectors.KeysName, apikey.Stream(revoked.State.ID))
	e.Clock.Advance(2 * time.Hour) // past the expiring key's expires_at (the access token lives 15m, so it expires too)
	for name, s := range map[string]grpc.ClientStreamingClient[ingestv1.ReportRequest, ingestv1.ReportResponse]{
		"revoked key": revokedStream, "expired key": expiringStream, "expired access token": sessionStream,
	} {
		// Nothing more is sent: the server ends the stream on its own.
		err := s.RecvMsg(new(ingestv1.ReportResponse))
		if code(err) != codes.Unauthenticated {
			t.Errorf("%s: stream ended with %v, want Unauthenticated", name, err)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("%s: ended after %s", name, took)
		}
	}
	t.Logf("streams ended %s after the revocation", time.Since(start).Round(time.Millisecond))
	// A key still valid keeps its stream: it closes with the answer.
	if err := keptStream.Send(&ingestv1.ReportRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := keptStream.CloseAndRecv(); err != nil {
		t.Fatalf("the valid key's stream: %v", err)
	}
}

// A signed-out session ends its streams too.
func TestOpenStreamEndsOnSignOut(t *testing.T) {
	t.Parallel()
	e := grpctest.StartWith(t, grpctest.Options{RequestLog: true})
	admin := authtest.Email("stream-logout")
	e.Superuser(t, admin, "admin password 1")
	staff := e.SignIn(t, admin)
	ctx, cancel := context.WithTimeout(withBearer(staff.Access), 30*time.Second)
	defer cancel()
	s, err := ingestv1.NewIngestServiceClient(e.Conn).Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&ingestv1.ReportRequest{}); err != nil {
		t.Fatal(err)
	}
	if r := e.Do(t, http.MethodPost, "/api/auth/logout/", map[string]string{"refresh": staff.Refresh}); r.Status != http.StatusOK {
		t.Fatalf("logout: %d %s", r.Status, r.Raw)
	}
	if err := s.RecvMsg(new(ingestv1.ReportResponse)); code(err) != codes.Unauthenticated {
		t.Fatalf("stream after sign-out ended with %v, want Unauthenticated", err)
	}
}

// limitedServer runs a server with l and returns its address.
func limitedServer(t *testing.T, l grpcserver.Limits) string {
	t.Helper()
	srv, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second, Limits: l}, slogTo(&grpctest.Logs{}), anyone{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return <-srv.Started()
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// One connection holds at most MaxConcurrentStreams open calls: anonymous
// health Watch streams past the limit wait, and one starts as soon as
// another ends.
func TestConcurrentStreamsPerConnectionAreBounded(t *testing.T) {
	t.Parallel()
	const limit = 5
	addr := limitedServer(t, grpcserver.Limits{MaxConcurrentStreams: limit})
	h := healthpb.NewHealthClient(dial(t, addr))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancels []context.CancelFunc
	for i := range limit {
		sctx, scancel := context.WithCancel(ctx)
		cancels = append(cancels, scancel)
		w, err := h.Watch(sctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	// The next one is not served while the others stay open.
	first := make(chan error, 1)
	go func() {
		w, err := h.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		first <- err
	}()
	select {
	case err := <-first:
		t.Fatalf("stream %d of one connection was served: %v", limit+1, err)
	case <-time.After(time.Second):
	}
	cancels[0]()
	select {
	case err := <-first:
		if err != nil {
			t.Fatalf("the waiting stream: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting stream never started after another ended")
	}
}

// A message over MaxRecvMsgBytes is refused with ResourceExhausted.
func TestMessageSizeIsBounded(t *testing.T) {
	t.Parallel()
	addr := limitedServer(t, grpcserver.Limits{MaxRecvMsgBytes: 1 << 20})
	h := healthpb.NewHealthClient(dial(t, addr))
	ctx := context.Background()
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: strings.Repeat("x", 2<<20)}); code(err) != codes.ResourceExhausted {
		t.Fatalf("2 MiB message: %v, want ResourceExhausted", err)
	}
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("small message after: %v", err)
	}
	// The bound is on the message inflated, not as sent: 2 MiB of one
	// byte is 2 KB of gzip, and grpc-go stops inflating past the limit.
	big := &healthpb.HealthCheckRequest{Service: strings.Repeat("x", 2<<20)}
	if _, err := h.Check(ctx, big, grpc.UseCompressor(gzip.Name)); code(err) != codes.ResourceExhausted {
		t.Fatalf("2 MiB message in 2 KB of gzip: %v, want ResourceExhausted", err)
	}
}

// A connection past MaxConnectionAge is sent GOAWAY, and a stream still
// open on it is ended after the grace.
func TestConnectionAgeEndsStreams(t *testing.T) {
	t.Parallel()
	addr := limitedServer(t, grpcserver.Limits{MaxConnectionAge: 300 * time.Millisecond, MaxConnectionAgeGrace: 300 * time.Millisecond})
	w, err := healthpb.NewHealthClient(dial(t, addr)).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := w.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if code(err) != codes.Unavailable {
			t.Fatalf("stream ended with %v, want Unavailable", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a stream outlived the connection's age and grace")
	}
}

// A client pinging faster than KeepaliveMinTime gets GOAWAY with
// ENHANCE_YOUR_CALM ("too_many_pings"), read off the wire.
func TestKeepaliveIsEnforced(t *testing.T) {
	t.Parallel()
	addr := limitedServer(t, grpcserver.Limits{KeepaliveMinTime: time.Minute})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			break // the server may close as soon as it has had enough
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY before %v", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeEnhanceYourCalm || !strings.Contains(string(ga.DebugData()), "too_many_pings") {
				t.Fatalf("GOAWAY %v %q", ga.ErrCode, ga.DebugData())
			}
			return
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			if err := fr.WriteSettingsAck(); err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	t.Parallel()
	for _, l := range []grpcserver.Limits{
		{MaxConcurrentStreams: -1}, {MaxRecvMsgBytes: -1}, {MaxSendMsgBytes: 3 << 30}, {KeepaliveMinTime: -time.Second},
		{MaxConnectionAge: -1}, {CredentialCheck: -1},
	} {
		if err := (grpcserver.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second, Limits: l}).Validate(); err == nil {
			t.Errorf("%+v accepted", l)
		}
	}
}
