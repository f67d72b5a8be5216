package grpcserver

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	"github.com/cfgd/cfgd/events/requestlog"
)

// Reporter takes the request-log events of served calls. Report must not
// block: the call has finished and its caller is waiting
// (requestlog.Batcher drops instead).
type Reporter interface {
	Report(ctx context.Context, events []requestlog.Event)
}

// Option changes how New builds the server.
type Option func(*options)

type options struct {
	reporter Reporter
}

// WithRequestLog reports every served call to r (a request log, docs/api.md), with the
// caller's user and API key when authenticated; calls refused by
// authentication are reported too, unauthenticated. The ingest service's
// and the OTLP trace service's own calls are not: each would add one more
// event per batch of events, and the reporter package's calls to cfgd
// would report themselves.
func WithRequestLog(r Reporter) Option { return func(o *options) { o.reporter = r } }

// HeaderRequestID is the metadata key a caller may set to name its request
// in the log.
const HeaderRequestID = "x-request-id"

// callRecord is where the auth interceptor, which runs inside the
// reporting one, leaves the principal for it.
type callRecord struct {
	principal Principal
	ok        bool
}

type callRecordKey struct{}

// notePrincipal records p for the reporting interceptor, if one runs.
func notePrincipal(ctx context.Context, p Principal) {
	if r, ok := ctx.Value(callRecordKey{}).(*callRecord); ok {
		r.principal, r.ok = p, true
	}
}

// OTLPTraceService is OpenTelemetry's trace export service (api/otlp
// serves it): like the ingest service, its calls carry request logs and
// are not reported themselves.
const OTLPTraceService = "opentelemetry.proto.collector.trace.v1.TraceService"

func reported(fullMethod string) bool {
	svc, _ := requestlog.SplitMethod(fullMethod)
	return svc != ingestv1.IngestService_ServiceDesc.ServiceName && svc != OTLPTraceService
}

func report(ctx context.Context, r Reporter, rec *callRecord, fullMethod string, start time.Time, err error) {
	st := status.Convert(err)
	c := requestlog.Call{FullMethod: fullMethod, Code: uint32(st.Code()), Message: st.Message(), Start: start, End: time.Now()}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.Peer = p.Addr.String()
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if ids := md.Get(HeaderRequestID); len(ids) > 0 {
			c.RequestID = ids[0]
		}
	}
	e := requestlog.FromCall(c)
	e.ReportedBy = requestlog.ReportedBySelf
	if rec.ok {
		e.IsAuthenticated = true
		e.UserID, e.APIKeyID = rec.principal.UserID, rec.principal.KeyID
		e.Username = requestlog.Clean(rec.principal.Username, requestlog.MaxUsername)
		e.APIKeyName = requestlog.Clean(rec.principal.KeyName, requestlog.MaxAPIKeyName)
	}
	// The call's own context may be cancelled already; the report is not
	// part of the call.
	r.Report(context.WithoutCancel(ctx), []requestlog.Event{e})
}

func unaryReport(r Reporter) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if !reported(info.FullMethod) {
			return h(ctx, req)
		}
		start, rec := time.Now(), &callRecord{}
		resp, err := h(context.WithValue(ctx, callRecordKey{}, rec), req)
		report(ctx, r, rec, info.FullMethod, start, err)
		return resp, err
	}
}

func streamReport(r Reporter) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if !reported(info.FullMethod) {
			return h(srv, ss)
		}
		start, rec := time.Now(), &callRecord{}
		err := h(srv, &recordStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), callRecordKey{}, rec)})
		report(ss.Context(), r, rec, info.FullMethod, start, err)
		return err
	}
}

type recordStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *recordStream) Context() context.Context { return s.ctx }
