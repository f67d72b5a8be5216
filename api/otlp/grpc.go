package otlp

import (
	"context"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"

	// OTLP exporters may compress with gzip (OTEL_EXPORTER_OTLP_COMPRESSION);
	// the codec registers itself for every server of the process.
	_ "google.golang.org/grpc/encoding/gzip"

	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/deploy/errcode"
)

// ServiceName is the OTLP trace service on the gRPC port; cfgd does not
// report its calls to the request log (they carry request logs).
const ServiceName = grpcserver.OTLPTraceService

// traceService is TraceService/Export. The server's interceptors have
// authenticated the caller (x-api-key) and turn an *errcode.Error into
// its status: UNAVAILABLE, which OTLP clients retry, or a code they do
// not (INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED).
type traceService struct {
	ptraceotlp.UnimplementedGRPCServer
	r *Receiver
}

// Export implements ptraceotlp.GRPCServer.
func (s *traceService) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	p, ok := grpcserver.PrincipalFrom(ctx)
	if !ok {
		return ptraceotlp.ExportResponse{}, errcode.New(errcode.NotAuthenticated, "not authenticated")
	}
	if err := allowed(p); err != nil {
		return ptraceotlp.ExportResponse{}, err
	}
	return s.r.export(ctx, p, req.Traces())
}

// RegisterGRPC serves TraceService/Export on srv.
func (r *Receiver) RegisterGRPC(srv *grpcserver.Server) {
	srv.RegisterWith(ServiceName, func(s *grpc.Server) { ptraceotlp.RegisterGRPCServer(s, &traceService{r: r}) })
}
