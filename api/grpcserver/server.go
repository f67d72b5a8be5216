package grpcserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	authv1 "github.com/cfgd/cfgd/api/protos/cfgd/auth/v1"
	"github.com/cfgd/cfgd/deploy/errcode"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// Config of the server.
type Config struct {
	// Addr is the listen address (GRPC__ADDR); port 0 picks a free one.
	Addr string
	// ShutdownTimeout bounds the graceful stop; calls still running then
	// are cancelled. Default 15s.
	ShutdownTimeout time.Duration
	Limits
}

// Limits bound what one client can hold open or send (GRPC__* settings);
// DefaultLimits has each default, and a zero field takes it.
type Limits struct {
	// MaxConcurrentStreams per connection: one connection cannot hold
	// thousands of open calls (health Watch streams, say).
	MaxConcurrentStreams int
	// MaxRecvMsgBytes and MaxSendMsgBytes bound one message.
	MaxRecvMsgBytes int64
	MaxSendMsgBytes int64
	// KeepaliveMinTime is the shortest ping interval a client may use;
	// a client pinging faster (or pinging with no call open) is sent
	// GOAWAY ("too_many_pings").
	KeepaliveMinTime time.Duration
	// KeepaliveTime is how long a connection stays quiet before the server
	// pings it; KeepaliveTimeout how long it then waits for the answer
	// before closing it.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// MaxConnectionIdle closes a connection with no call for this long.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge sends GOAWAY to a connection this old; the calls on
	// it then get MaxConnectionAgeGrace to finish before it is closed, so
	// no credential check is good for longer than the two together.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	// CredentialCheck is how often the credentials of an open stream are
	// checked again: a revoked or expired key, or a revoked session, ends
	// the stream within this long (Unauthenticated).
	CredentialCheck time.Duration
}

// DefaultLimits are the limits of a server whose settings are not given.
func DefaultLimits() Limits {
	return Limits{
		MaxConcurrentStreams: 100,
		MaxRecvMsgBytes:      4 << 20,
		MaxSendMsgBytes:      4 << 20,
		KeepaliveMinTime:     30 * time.Second,
		KeepaliveTime:        2 * time.Minute,
		KeepaliveTimeout:     20 * time.Second,
		MaxConnectionIdle:    15 * time.Minute,
		MaxConnectionAge:     30 * time.Minute,
		// Long enough for an ingest stream to flush its last batch.
		MaxConnectionAgeGrace: time.Minute,
		CredentialCheck:       5 * time.Second,
	}
}

// withDefaults fills every zero limit from DefaultLimits (the one place
// they are written; settings start from it too).
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	l.MaxConcurrentStreams = cmp.Or(l.MaxConcurrentStreams, d.MaxConcurrentStreams)
	l.MaxRecvMsgBytes = cmp.Or(l.MaxRecvMsgBytes, d.MaxRecvMsgBytes)
	l.MaxSendMsgBytes = cmp.Or(l.MaxSendMsgBytes, d.MaxSendMsgBytes)
	l.KeepaliveMinTime = cmp.Or(l.KeepaliveMinTime, d.KeepaliveMinTime)
	l.KeepaliveTime = cmp.Or(l.KeepaliveTime, d.KeepaliveTime)
	l.KeepaliveTimeout = cmp.Or(l.KeepaliveTimeout, d.KeepaliveTimeout)
	l.MaxConnectionIdle = cmp.Or(l.MaxConnectionIdle, d.MaxConnectionIdle)
	l.MaxConnectionAge = cmp.Or(l.MaxConnectionAge, d.MaxConnectionAge)
	l.MaxConnectionAgeGrace = cmp.Or(l.MaxConnectionAgeGrace, d.MaxConnectionAgeGrace)
	l.CredentialCheck = cmp.Or(l.CredentialCheck, d.CredentialCheck)
	return l
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("rpc: listen address %q: expected host:port", c.Addr))
	}
	if c.ShutdownTimeout <= 0 {
		// No default here: serve passes HTTP__SHUTDOWN_TIMEOUT's.
		errs = append(errs, errors.New("rpc: shutdown timeout must be positive"))
	}
	l := c.Limits
	if l.MaxConcurrentStreams < 0 {
		errs = append(errs, errors.New("rpc: max concurrent streams must not be negative"))
	}
	if l.MaxRecvMsgBytes < 0 || l.MaxSendMsgBytes < 0 || l.MaxRecvMsgBytes > math.MaxInt32 || l.MaxSendMsgBytes > math.MaxInt32 {
		errs = append(errs, errors.New("rpc: message size limits must be from 0 (the default) to 2 GiB"))
	}
	for name, d := range map[string]time.Duration{
		"keepalive min time": l.KeepaliveMinTime, "keepalive time": l.KeepaliveTime, "keepalive timeout": l.KeepaliveTimeout,
		"max connection idle": l.MaxConnectionIdle, "max connection age": l.MaxConnectionAge,
		"max connection age grace": l.MaxConnectionAgeGrace, "credential check": l.CredentialCheck,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("rpc: %s must not be negative", name))
		}
	}
	return errors.Join(errs...)
}

// serverOptions are the transport limits of l as gRPC options.
func (l Limits) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(l.MaxConcurrentStreams)),
		grpc.MaxRecvMsgSize(int(l.MaxRecvMsgBytes)),
		grpc.MaxSendMsgSize(int(l.MaxSendMsgBytes)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: l.KeepaliveTime, Timeout: l.KeepaliveTimeout, MaxConnectionIdle: l.MaxConnectionIdle,
			MaxConnectionAge: l.MaxConnectionAge, MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		}),
	}
}

// Server is the gRPC server with its lifecycle.
type Server struct {
	cfg     Config
	log     *slog.Logger
	srv     *grpc.Server
	health  *health.Server
	metrics *grpcprom.ServerMetrics
	started chan string

	mu        sync.Mutex
	running   bool
	startedAt time.Time
}

// New builds the server; register services with Register, then Run.
func New(cfg Config, log *slog.Logger, authn Authenticator, opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if authn == nil {
		return nil, errors.New("rpc: an authenticator is required")
	}
	s := &Server{
		cfg: cfg, log: log, health: health.NewServer(), started: make(chan string, 1),
		metrics: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),
	}
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall)}
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "grpc handler panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		return errcode.New(errcode.Internal, errcode.MessageInternal)
	})
	needsAuth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool { return !Public(c.Service) })
	authFn := authFunc(authn, log)
	// Metrics outside the rest, so they count every call with the status
	// the caller gets; the answer inside logging, so the log shows it too.
	unary := []grpc.UnaryServerInterceptor{
		s.metrics.UnaryServerInterceptor(),
		logging.UnaryServerInterceptor(slogger(log), logOpts...),
		unaryAnswer(log),
		recovery.UnaryServerInterceptor(recoverOpt),
		selector.UnaryServerInterceptor(grpcauth.UnaryServerInterceptor(authFn), needsAuth),
	}
	stream := []grpc.StreamServerInterceptor{
		s.metrics.StreamServerInterceptor(),
		logging.StreamServerInterceptor(slogger(log), logOpts...),
		streamAnswer(log),
		recovery.StreamServerInterceptor(recoverOpt),
		selector.StreamServerInterceptor(grpcauth.StreamServerInterceptor(authFn), needsAuth),
		selector.StreamServerInterceptor(streamRecheck(authn, cfg.CredentialCheck, log), needsAuth),
	}
	if o.reporter != nil {
		// Outermost, so it sees the status recovery and auth give.
		unary = append([]grpc.UnaryServerInterceptor{unaryReport(o.reporter)}, unary...)
		stream = append([]grpc.StreamServerInterceptor{streamReport(o.reporter)}, stream...)
	}
	srvOpts := append(cfg.Limits.serverOptions(), grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	s.srv = grpc.NewServer(srvOpts...)
	healthpb.RegisterHealthServer(s.srv, s.health)
	reflection.Register(s.srv)
	return s, nil
}

// Public tells whether a service is open without credentials: the health
// service and reflection, which tools and load balancers call, and sign-in
// (cfgd.auth.v1), which is how a caller gets credentials.
func Public(service string) bool {
	return service == healthpb.Health_ServiceDesc.ServiceName || strings.HasPrefix(service, "grpc.reflection.") ||
		service == authv1.AuthService_ServiceDesc.ServiceName
}

func slogger(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// Metrics are the server's call metrics (go-grpc-middleware's Prometheus
// provider: grpc_server_started_total, grpc_server_handled_total by code,
// grpc_server_msg_received_total, grpc_server_msg_sent_total,
// grpc_server_handling_seconds); the caller registers them on its
// registry. Every method of the services registered so far starts at 0
// here, so the series exist before Run (which does it again for later
// registrations).
func (s *Server) Metrics() prometheus.Collector {
	s.metrics.InitializeMetrics(s.srv)
	return s.metrics
}

// Register adds a service and marks it SERVING in the health service.
// Its unary methods decode their request after the interceptors, not
// before as generated handlers do: a caller without credentials is
// refused before cfgd spends anything on its message (see decodeLate).
func (s *Server) Register(desc *grpc.ServiceDesc, impl any) {
	s.srv.RegisterService(decodeLate(desc), impl)
	s.health.SetServingStatus(desc.ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// Started yields the bound address once the server listens.
func (s *Server) Started() <-chan string { return s.started }

// Run serves until ctx ends, then stops gracefully: health turns
// NOT_SERVING, new calls are refused, and running ones get
// ShutdownTimeout to finish.
func (s *Server) Run(ctx context.Context) error {
	// Every method of every registered service starts at zero, so a
	// dashboard sees a method before its first call.
	s.metrics.InitializeMetrics(s.srv)
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("grpc listen on %s (GRPC__ADDR): %w", s.cfg.Addr, err)
	}
	s.mu.Lock()
	s.running, s.startedAt = true, time.Now()
	s.mu.Unlock()
	s.log.Info("grpc server listening", "addr", ln.Addr().String())
	s.started <- ln.Addr().String()
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()
	select {
	case err := <-errc:
		s.setStopped()
		return fmt.Errorf("grpc serve: %w", err)
	case <-ctx.Done():
	}
	s.setStopped()
	s.health.Shutdown()
	done := make(chan struct{})
	go func() { s.srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownTimeout):
		s.log.Warn("grpc graceful stop timed out; cancelling the calls still running")
		s.srv.Stop()
		<-done
	}
	<-errc
	s.log.Info("grpc server stopped")
	return nil
}

func (s *Server) setStopped() {
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
}

// Status is the live server's state.
type Status struct {
	Running  bool
	Uptime   time.Duration
	Services int // registered services, health and reflection included
}

// Status reports the server's state.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Running: s.running, Services: len(s.srv.GetServiceInfo())}
	if s.running {
		st.Uptime = time.Since(s.startedAt)
	}
	return st
}

// Services lists the registered service names.
func (s *Server) Services() []string {
	info := s.srv.GetServiceInfo()
	out := make([]string, 0, len(info))
	for name := range info {
		out = append(out, name)
	}
	return out
}
