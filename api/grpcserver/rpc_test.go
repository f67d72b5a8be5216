package grpcserver_test

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/projections/projectors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/api/protos"
	apikeysv1 "github.com/cfgd/cfgd/api/protos/cfgd/apikeys/v1"
	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/events/apikey"
)

func withKey(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), grpcserver.HeaderAPIKey, key)
}

func withBearer(tok string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), grpcserver.HeaderAuthorization, "Bearer "+tok)
}

func code(err error) codes.Code { return status.Code(err) }

// eventually retries check until it holds or 5s pass.
func eventually(t *testing.T, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCallersAuthenticate(t *testing.T) {
	t.Parallel()
	e := grpctest.Start(t)
	ctx := context.Background()
	admin := authtest.Email("rpc-admin")
	e.Superuser(t, admin, "admin password 1")
	staff := e.SignIn(t, admin)
	plain := e.SignIn(t, authtest.Email("rpc-user"))
	exp := e.Clock.Now().Add(time.Hour)
	valid := e.NewKey(t, "svc", apikey.TypeService, admin, nil)
	expiring := e.NewKey(t, "soon", apikey.TypeCLI, admin, &exp)
	revoked := e.NewKey(t, "gone", apikey.TypeWebhook, admin, nil)
	if _, err := e.Revoke.Handle(ctx, apikeys.Revoke{ID: revoked.State.ID, RevokedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	e.WaitProjected(t, projectors.KeysName, apikey.Stream(revoked.State.ID))
	keys := apikeysv1.NewAPIKeyServiceClient(e.Conn)
	mon := monitorv1.NewMonitorServiceClient(e.Conn)

	// Authentication is checked on the monitor's health (any caller with
	// credentials); the key service is staff only, as on REST, so a
	// key is refused there with PermissionDenied.
	tests := []struct {
		name       string
		ctx        context.Context
		want, list codes.Code
	}{
		{"no credentials", ctx, codes.Unauthenticated, codes.Unauthenticated},
		{"valid key", withKey(valid.Key), codes.OK, codes.PermissionDenied},
		{"expiring key still valid", withKey(expiring.Key), codes.OK, codes.PermissionDenied},
		{"unknown key", withKey(apikey_(t)), codes.Unauthenticated, codes.Unauthenticated},
		{"not a key", withKey("hello"), codes.Unauthenticated, codes.Unauthenticated},
		{"key one character off", withKey(valid.Key[:len(valid.Key)-1] + flip(valid.Key[len(valid.Key)-1])), codes.Unauthenticated, codes.Unauthenticated},
		{"staff access token", withBearer(staff.Access), codes.OK, codes.OK},
		{"refresh token as bearer", withBearer(staff.Refresh), codes.Unauthenticated, codes.Unauthenticated},
		{"garbage bearer", withBearer("abc.def.ghi"), codes.Unauthenticated, codes.Unauthenticated},
		{"non-staff access token", withBearer(plain.Access), codes.OK, codes.PermissionDenied},
		{"other scheme", metadata.AppendToOutgoingContext(ctx, "authorization", "Basic YTpi"), codes.Unauthenticated, codes.Unauthenticated},
	}
	for _, tc := range tests {
		if _, err := mon.Health(tc.ctx, &monitorv1.HealthRequest{}); code(err) != tc.want {
			t.Errorf("%s: Health gave %v, want %v", tc.name, err, tc.want)
		}
		if _, err := keys.List(tc.ctx, &apikeysv1.ListRequest{}); code(err) != tc.list {
			t.Errorf("%s: List gave %v, want %v", tc.name, err, tc.list)
		}
	}
	// The revoked key is refused within the authenticator's cache TTL.
	eventually(t, "revoked key refused", func() bool {
		_, err := mon.Health(withKey(revoked.Key), &monitorv1.HealthRequest{})
		return code(err) == codes.Unauthenticated
	})
	// Any signed-in user may ask for the monitor's health.
	if r, err := mon.Health(withBearer(plain.Access), &monitorv1.HealthRequest{}); err != nil || !r.ServerRunning || r.Status != "healthy" {
		t.Fatalf("monitor health with a user token: %v %v", r, err)
	}
	if _, err := mon.Health(ctx, &monitorv1.HealthRequest{}); code(err) != codes.Unauthenticated {
		t.Fatalf("monitor health without credentials: %v", err)
	}

	// Revoking a key that was just used: refused from then on.
	if _, err := mon.Health(withKey(valid.Key), &monitorv1.HealthRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Revoke.Handle(ctx, apikeys.Revoke{ID: valid.State.ID, RevokedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, "key revoked after use refused", func() bool {
		_, err := mon.Health(withKey(valid.Key), &monitorv1.HealthRequest{})
		return code(err) == codes.Unauthenticated
	})
	t.Logf("revocation honoured after %s", time.Since(start).Round(time.Millisecond))

	// Expiry needs no event: past expires_at the key is refused at once.
	e.Clock.Advance(2 * time.Hour)
	eventually(t, "expired key refused", func() bool {
		_, err := mon.Health(withKey(expiring.Key), &monitorv1.HealthRequest{})
		return code(err) == codes.Unauthenticated
	})
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func apikey_(t *testing.T) string {
	k, err := apikeys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestAPIKeyServiceAnswers(t *testing.T) {
	t.Parallel()
	e := grpctest.Start(t)
	admin := authtest.Email("rpc-list")
	e.Superuser(t, admin, "admin password 1")
	k := e.NewKey(t, "first", apikey.TypeInternal, admin, nil)
	e.NewKey(t, "second", apikey.TypeCLI, admin, nil)
	c := apikeysv1.NewAPIKeyServiceClient(e.Conn)
	ctx := withBearer(e.SignIn(t, admin).Access)

	got, err := c.Get(ctx, &apikeysv1.GetRequest{Id: k.State.ID})
	if err != nil || got.Name != "first" || got.MaskedKey != k.Key[:4]+"..."+k.Key[len(k.Key)-4:] || !got.IsValid || got.UserEmail != admin || got.CreatedAt == "" {
		t.Fatalf("get: %v %v", got, err)
	}
	if _, err := c.Get(ctx, &apikeysv1.GetRequest{Id: 999999}); code(err) != codes.NotFound {
		t.Fatalf("get unknown: %v", err)
	}
	only := apikey.TypeCLI
	list, err := c.List(ctx, &apikeysv1.ListRequest{KeyType: only})
	if err != nil || list.Count != 1 || len(list.Results) != 1 || list.Results[0].Name != "second" {
		t.Fatalf("list cli: %v %v", list, err)
	}
	for _, bad := range []*apikeysv1.ListRequest{{PageSize: 1001}, {PageSize: -1}, {Page: -1}, {KeyType: "admin"}} {
		if _, err := c.List(ctx, bad); code(err) != codes.InvalidArgument {
			t.Errorf("list %v: %v", bad, err)
		}
	}
	st, err := c.Stats(ctx, &apikeysv1.StatsRequest{})
	if err != nil || st.TotalKeys != 2 || st.ActiveKeys != 2 || len(st.KeysByType) != 5 || st.KeysByType["cli"] != 1 || st.KeysByType["webhook"] != 0 {
		t.Fatalf("stats: %v %v", st, err)
	}
}

// Health and reflection need no credentials, and reflection lists exactly
// the services of the proto files served, plus health and reflection.
func TestHealthAndReflectionArePublic(t *testing.T) {
	t.Parallel()
	e := grpctest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(e.Conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	h, err = healthpb.NewHealthClient(e.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "cfgd.apikeys.v1.APIKeyService"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of the key service: %v %v", h, err)
	}

	stream, err := reflectionpb.NewServerReflectionClient(e.Conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		// Health and reflection come with grpc-go, not from a cfgd proto.
		if !strings.HasPrefix(s.Name, "grpc.") {
			listed = append(listed, s.Name)
		}
	}
	sort.Strings(listed)

	// The services declared in the proto files the REST endpoint serves.
	var declared []string
	key := adminKey(t, e)
	r := e.Do(t, http.MethodGet, "/cfg/grpc/proto-files/", nil, "X-API-Key", key)
	files, _ := r.Body["files"].([]any)
	if r.Status != http.StatusOK || len(files) == 0 {
		t.Fatalf("proto list: %d %s", r.Status, r.Raw)
	}
	for _, f := range files {
		label := f.(map[string]any)["app_label"].(string)
		body := e.Do(t, http.MethodGet, "/cfg/grpc/proto-files/"+label+"/", nil, "X-API-Key", key).Raw
		info := protos.Parse(body)
		for _, name := range serviceNames(string(body)) {
			declared = append(declared, info.Package+"."+name)
		}
	}
	sort.Strings(declared)
	if !slices.Equal(listed, declared) || len(listed) == 0 {
		t.Fatalf("reflection lists %v, the proto files declare %v", listed, declared)
	}
	if got := e.GRPC.Status().Services; got != len(resp.GetListServicesResponse().GetService()) {
		t.Fatalf("status counts %d services, reflection lists %d", got, len(resp.GetListServicesResponse().GetService()))
	}
}

func adminKey(t *testing.T, e *grpctest.Env) string {
	t.Helper()
	admin := authtest.Email("reflect")
	e.Superuser(t, admin, "admin password 1")
	return e.NewKey(t, "reflection", apikey.TypeDevelopment, admin, nil).Key
}

// serviceNames picks "service X {" declarations out of proto source.
func serviceNames(src string) []string {
	var out []string
	f := strings.Fields(src)
	for i := 0; i+2 < len(f); i++ {
		if f[i] == "service" && f[i+2] == "{" {
			out = append(out, f[i+1])
		}
	}
	return out
}

// panicky's every call panics.
type panicky struct {
	monitorv1.UnimplementedMonitorServiceServer
}

func (panicky) Health(context.Context, *monitorv1.HealthRequest) (*monitorv1.HealthResponse, error) {
	panic("boom")
}

// anyone lets every credential through: the test is about recovery.
type anyone struct{}

func (anyone) APIKey(context.Context, string) (grpcserver.Principal, error) {
	return grpcserver.Principal{Via: grpcserver.ViaAPIKey}, nil
}
func (anyone) RecheckAPIKey(context.Context, string) error { return nil }

func (anyone) Bearer(context.Context, string) (grpcserver.Principal, error) {
	return grpcserver.Principal{Via: grpcserver.ViaBearer}, nil
}

func TestPanicBecomesInternalAndServerKeepsServing(t *testing.T) {
	t.Parallel()
	logs := &grpctest.Logs{}
	srv, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}, slogTo(logs), anyone{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(&monitorv1.MonitorService_ServiceDesc, panicky{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	addr := <-srv.Started()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := monitorv1.NewMonitorServiceClient(conn)
	for i := range 3 {
		_, err := c.Health(withKey("x"), &monitorv1.HealthRequest{})
		if code(err) != codes.Internal || strings.Contains(err.Error(), "boom") {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after panics: %v %v", h, err)
	}
	if !strings.Contains(logs.String(), "grpc handler panic") {
		t.Fatalf("the panic was not logged: %s", logs)
	}
	if !srv.Status().Running {
		t.Fatal("status says stopped while serving")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := srv.Status(); st.Running || st.Uptime != 0 {
		t.Fatalf("status after stop: %+v", st)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a stopped server answered")
	}
}

// slow answers after a pause, long enough to be caught by a stop.
type slow struct {
	monitorv1.UnimplementedMonitorServiceServer
	entered chan struct{}
}

func (s slow) Health(context.Context, *monitorv1.HealthRequest) (*monitorv1.HealthResponse, error) {
	close(s.entered)
	time.Sleep(300 * time.Millisecond)
	return &monitorv1.HealthResponse{Status: "healthy"}, nil
}

// A stop lets the call in flight finish and refuses new ones.
func TestGracefulStopFinishesCallsInFlight(t *testing.T) {
	t.Parallel()
	srv, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}, slogTo(&grpctest.Logs{}), anyone{})
	if err != nil {
		t.Fatal(err)
	}
	impl := slow{entered: make(chan struct{})}
	srv.Register(&monitorv1.MonitorService_ServiceDesc, impl)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	addr := <-srv.Started()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	answer := make(chan error, 1)
	go func() {
		_, err := monitorv1.NewMonitorServiceClient(conn).Health(withKey("x"), &monitorv1.HealthRequest{})
		answer <- err
	}()
	<-impl.entered
	cancel()
	if err := <-answer; err != nil {
		t.Fatalf("the call in flight failed: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fresh, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	if _, err := healthpb.NewHealthClient(fresh).Check(cctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a stopped server took a new call")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  grpcserver.Config
		want string
	}{
		{grpcserver.Config{Addr: "127.0.0.1:50051", ShutdownTimeout: time.Second}, ""},
		{grpcserver.Config{Addr: "localhost", ShutdownTimeout: time.Second}, "expected host:port"},
		{grpcserver.Config{Addr: "x", ShutdownTimeout: -1}, "must be positive"},
		{grpcserver.Config{Addr: "127.0.0.1:1"}, "shutdown timeout must be positive"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v", tc.cfg, err)
		}
	}
	if _, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}, slogTo(&grpctest.Logs{}), nil); err == nil {
		t.Error("no authenticator accepted")
	}
}
