package otlp

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	// OTLP exporters may compress with gzip (OTEL_EXPORTER_OTLP_COMPRESSION);
	// the codec registers itself for every server of the process.
	_ "google.golang.org/grpc/encoding/gzip"

	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog/ingestmetrics"
)

// ServiceName is the OTLP trace service on the gRPC port; cfgd does not
// report its calls to the request log (they carry request logs).
const ServiceName = grpcserver.OTLPTraceService

// traceService is TraceService/Export. The server's interceptors have
// authenticated the caller (x-api-key) before the request is decoded
// (grpcserver.Server.Register) and turn an *errcode.Error into its
// status: UNAVAILABLE, which OTLP clients retry, or a code they do not
// (INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED).
type traceService struct {
	r *Receiver
}

// traceServiceDesc is opentelemetry.proto.collector.trace.v1.TraceService,
// written here rather than taken from ptraceotlp.RegisterGRPCServer,
// whose handler decodes the whole request at once: this one takes the
// message as bytes, so the receiver checks them against the bounds before
// decoding (unmarshal), as on HTTP.
var traceServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Export", Handler: exportHandler}},
	Metadata:    "opentelemetry/proto/collector/trace/v1/trace_service.proto",
}

// exportHandler has the shape of a generated unary handler. The request
// is read into an Empty: every field of an ExportTraceServiceRequest is
// unknown to it, so the codec keeps the message's bytes whole (its
// unknown fields) and decodes nothing; the answer goes back the same way.
func exportHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(emptypb.Empty)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(*traceService)
	if interceptor == nil {
		return s.export(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + ServiceName + "/Export"}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return s.export(ctx, req.(*emptypb.Empty))
	})
}

func (s *traceService) export(ctx context.Context, in *emptypb.Empty) (*emptypb.Empty, error) {
	p, ok := grpcserver.PrincipalFrom(ctx)
	if !ok {
		return nil, errcode.New(errcode.NotAuthenticated, "not authenticated")
	}
	if err := allowed(p); err != nil {
		return nil, err
	}
	req, err := unmarshal(typeProtobuf, in.ProtoReflect().GetUnknown())
	if err != nil {
		s.r.metrics.Rejected(ingestmetrics.OTLP, ingestmetrics.Malformed, 1)
		return nil, err
	}
	res, err := s.r.export(ctx, p, req.Traces())
	if err != nil {
		return nil, err
	}
	b, err := res.MarshalProto()
	if err != nil {
		return nil, fmt.Errorf("otlp answer: %w", err)
	}
	out := new(emptypb.Empty)
	out.ProtoReflect().SetUnknown(b)
	return out, nil
}

// RegisterGRPC serves TraceService/Export on srv.
func (r *Receiver) RegisterGRPC(srv *grpcserver.Server) {
	srv.Register(&traceServiceDesc, &traceService{r: r})
}
