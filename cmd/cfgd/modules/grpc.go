package modules

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/projectors"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/api/otlp"
	"github.com/cfgd/cfgd/api/protos"
	apikeysv1 "github.com/cfgd/cfgd/api/protos/cfgd/apikeys/v1"
	authv1 "github.com/cfgd/cfgd/api/protos/cfgd/auth/v1"
	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/api/rest/grpcadmin"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlog/ingestmetrics"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
)

// GRPCConfig of the gRPC monitoring module.
type GRPCConfig struct {
	RPC grpcserver.Config
	// ProtoDir is where the proto files are written (GRPC__PROTO_DIR).
	ProtoDir string
	// ReadWait bounds how long an admin create waits for the read model to
	// show the new key; default 5s.
	ReadWait time.Duration
	// Events sets the limits of every append; nil: the store's defaults.
	Events *store.Store
	// Report batches the request-log events of the calls the server serves
	// (requestlog.DefaultBatcherConfig when zero).
	Report requestlog.BatcherConfig
	// KeyFeeds are the API-key projection's other sources (the usage
	// counts from the request log), which its replay rebuilds.
	KeyFeeds []projections.Feed
}

// Validate joins every problem of c.
func (c GRPCConfig) Validate() error {
	var errs []error
	errs = append(errs, c.RPC.Validate())
	if c.Report != (requestlog.BatcherConfig{}) {
		errs = append(errs, c.Report.Validate())
	}
	if c.ProtoDir == "" {
		errs = append(errs, errors.New("grpc: the proto directory is required"))
	}
	return errors.Join(errs...)
}

// GRPCParts is the module assembled, with the pieces tests reach into.
type GRPCParts struct {
	Module Module
	Server *grpcserver.Server
	Keys   *apikeyview.Keys
	Protos *protos.Dir
	Create *apikeys.CreateHandler
	Revoke *apikeys.RevokeHandler
	// Reporter batches the request log of served calls; nil without a
	// producer.
	Reporter *requestlog.Batcher
	// Metrics are the server's call metrics (grpc_server_*) and, with a
	// producer, the reported and dropped events of served calls
	// (cfgd_grpc_requestlog_sent_total, cfgd_grpc_requestlog_dropped_total).
	// The caller registers them.
	Metrics []prometheus.Collector
}

// GRPCRequestLog is what the module uses of the request log. With a Producer
// the server reports every call it serves and serves cfgd.ingest.v1;
// with Queries cfgd.monitor.v1 answers the statistics. The zero value
// leaves both out (tests of other features).
type GRPCRequestLog struct {
	Producer grpcserver.Producer
	Queries  grpcserver.RequestLogQueries
	// RetentionDays bounds the created_at cfgd.ingest.v1 takes (0: the
	// sink's default).
	RetentionDays int
	// Idempotency keeps the answers of Report calls sent with an
	// idempotency key (nil: the key is ignored).
	Idempotency requestlog.KeyStore
	// Ingest counts what cfgd.ingest.v1 and OTLP accept and reject (nil:
	// nothing).
	Ingest *ingestmetrics.Metrics
}

// GRPC builds gRPC monitoring: the gRPC server (health, reflection,
// cfgd's services; callers authenticated through a's authenticator), the
// API-key commands, projection and read model, the REST endpoints and the
// proto files (written into ProtoDir now when missing or changed), and
// with rl the request log of every served call, cfgd.ingest.v1, OTLP
// trace export (gRPC TraceService/Export, HTTP POST /v1/traces) and the
// cfgd.monitor.v1 statistics. cfgd serve and the tests (grpctest) both
// build it here.
func GRPC(cfg GRPCConfig, a *auth.API, pool *pgxpool.Pool, log *slog.Logger, now func() time.Time, rl GRPCRequestLog) (GRPCParts, error) {
	if err := cfg.Validate(); err != nil {
		return GRPCParts{}, err
	}
	if cfg.Report == (requestlog.BatcherConfig{}) {
		cfg.Report = requestlog.DefaultBatcherConfig()
	}
	keys := apikeyview.NewKeys(pool, now)
	var db store.DB = pool
	if cfg.Events != nil {
		db = cfg.Events.Bind(pool)
	}
	var (
		opts     []grpcserver.Option
		reporter *requestlog.Batcher
	)
	if rl.Producer != nil {
		b, err := requestlog.NewBatcher(cfg.Report, rl.Producer.Produce, log)
		if err != nil {
			return GRPCParts{}, err
		}
		reporter = b
		opts = append(opts, grpcserver.WithRequestLog(b))
	}
	srv, err := grpcserver.New(cfg.RPC, log, grpcserver.NewSigninAuthenticator(a.App().Auth), opts...)
	if err != nil {
		return GRPCParts{}, err
	}
	srv.Register(&apikeysv1.APIKeyService_ServiceDesc, grpcserver.NewAPIKeys(keys, log))
	mon := grpcserver.NewMonitor(srv.Status)
	if rl.Queries != nil {
		mon = mon.WithQueries(rl.Queries, log)
	}
	srv.Register(&monitorv1.MonitorService_ServiceDesc, mon)
	srv.Register(&authv1.AuthService_ServiceDesc, grpcserver.NewAuth(a.App(), log))
	// Registered even without a producer (it then answers Unimplemented),
	// so reflection always lists what the proto files declare.
	// One accept path for the JSON ingest and OTLP: the same validation,
	// created_at window and producer, each transport counted apart.
	var ingestProducer grpcserver.Producer
	accept := &requestlog.Accepter{Now: now}
	if rl.Producer != nil {
		ingestProducer = rl.Ingest.Counting(rl.Producer, ingestmetrics.GRPC)
		accept.Produce = rl.Ingest.Counting(rl.Producer, ingestmetrics.OTLP).Produce
	}
	ing := grpcserver.NewIngest(ingestProducer, now, log).WithMetrics(rl.Ingest)
	if rl.RetentionDays > 0 {
		ing = ing.WithWindow(requestlog.WindowFor(rl.RetentionDays))
		accept.Window = requestlog.WindowFor(rl.RetentionDays)
	}
	if rl.Idempotency != nil {
		ing = ing.WithIdempotency(rl.Idempotency)
	}
	srv.Register(&ingestv1.IngestService_ServiceDesc, ing)
	// OTLP trace export on both ports (gRPC here, HTTP /v1/traces in
	// Routes): the gRPC server spans become request logs.
	var traces *otlp.Receiver
	if rl.Producer != nil {
		traces = otlp.New(otlp.ViaIngest{Ingest: accept}, grpcserver.NewSigninAuthenticator(a.App().Auth), log).WithMetrics(rl.Ingest)
		traces.RegisterGRPC(srv)
	}
	dir, err := protos.NewDir(cfg.ProtoDir)
	if err != nil {
		return GRPCParts{}, err
	}
	if res := dir.Generate(nil, false); len(res.Errors) > 0 {
		log.Warn("proto files not written (GRPC__PROTO_DIR); POST /cfg/grpc/proto-files/generate/ retries", "dir", dir.Root(), "errors", res.Errors)
	}
	p := GRPCParts{
		Server: srv, Keys: keys, Protos: dir,
		Create: apikeys.NewCreateHandler(db, now), Revoke: apikeys.NewRevokeHandler(db, now), Reporter: reporter,
	}
	p.Metrics = []prometheus.Collector{srv.Metrics()}
	if reporter != nil {
		p.Metrics = append(p.Metrics,
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "cfgd_grpc_requestlog_sent_total",
				Help: "Request-log events of served gRPC calls handed to Kafka.",
			}, func() float64 { return float64(reporter.Sent()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "cfgd_grpc_requestlog_dropped_total",
				Help: "Request-log events of served gRPC calls dropped: queue full, or Kafka slow or down.",
			}, func() float64 { return float64(reporter.Dropped()) }),
		)
	}
	keysProjection := projectors.Keys()
	keysProjection.Feeds = append(keysProjection.Feeds, cfg.KeyFeeds...)
	p.Module = Module{
		Name: "grpc",
		Routes: func(r *mux.Router) error {
			if traces != nil {
				traces.Mount(r)
			}
			return grpcadmin.Mount(r, grpcadmin.Deps{
				Staff: a.Staff(), StaffOrKey: a.StaffOrAPIKey(), Pool: pool, Keys: keys, Create: p.Create, Revoke: p.Revoke,
				Health: func() grpcadmin.Health {
					st := srv.Status()
					return grpcadmin.Health{Running: st.Running, Uptime: st.Uptime, Services: st.Services}
				},
				Protos: dir, ReadWait: cfg.ReadWait,
			})
		},
		Projections: []*projections.Projection{keysProjection},
		Servers:     []process.Runner{{Name: "grpc", Run: serveGRPC(srv, reporter)}},
	}
	return p, nil
}

// serve runs srv, and reporter beside it when there is one. The reporter
// stops after the server, within the server stage, so the last calls'
// events are flushed while the producer (a background runner, which stops
// after every server) still takes them.
func serveGRPC(srv *grpcserver.Server, reporter *requestlog.Batcher) func(context.Context) error {
	if reporter == nil {
		return srv.Run
	}
	return func(ctx context.Context) error {
		rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() { done <- reporter.Run(rctx) }()
		err := srv.Run(ctx)
		stop()
		<-done
		return err
	}
}
