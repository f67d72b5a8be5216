package main

import (
	"fmt"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/modules"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/sinks"

	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// grpcModule is gRPC monitoring: the gRPC server on GRPC__ADDR, API keys
// (commands, projection, read model), the REST endpoints under /api/grpc/,
// /cfg/grpc/ and /admin/api-keys/, and the proto files in GRPC__PROTO_DIR.
// Every call it serves is reported to the request log through prod, and
// cfgd.ingest.v1 and the cfgd.monitor.v1 statistics are served.
func grpcModule(w wiring, a *auth.API, prod *requestlogkafka.Producer, activeKeys requestlogview.ActiveAPIKeys) (modules.Module, error) {
	// The usage counts the request-log module's consumer keeps in api_keys
	// (same settings), rebuilt with the keys.
	uc := sinks.DefaultUsageConfig(w.bus)
	signer := w.signer
	uc.Signer = signer
	uc.Cutover = w.cutover(kafka.TopicAPIKeyUsage)
	usage, err := sinks.NewUsageFeed(uc, w.log)
	if err != nil {
		return modules.Module{}, err
	}
	p, err := modules.GRPC(modules.GRPCConfig{
		KeyFeeds: []projections.Feed{usage},
		RPC:      grpcserver.Config{Addr: w.app.Core.GRPCAddr, ShutdownTimeout: w.app.Core.ShutdownTimeout, Limits: w.app.GRPCLimits},
		ProtoDir: w.app.GRPCProtoDir,
		Events:   w.deps.events,
	}, a, w.deps.pg, w.log, time.Now, modules.GRPCRequestLog{
		Producer: prod, Queries: requestlogview.New(w.deps.ch, time.Now, activeKeys), RetentionDays: w.app.RequestLog.Sink.RetentionDays,
		Idempotency: requestlogview.NewIdempotency(w.deps.pg, time.Now, IdempotencyWait), Ingest: w.ingestMetrics,
	})
	if err != nil {
		return modules.Module{}, err
	}
	if w.metrics != nil {
		for _, c := range p.Metrics {
			if err := w.metrics.Register(c); err != nil {
				return modules.Module{}, fmt.Errorf("grpc metrics: %w", err)
			}
		}
	}
	return p.Module, nil
}
