package rig

import (
	"context"
	"crypto/sha256"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"

	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
)

// Report sends evs as one message of IngestService/Report with API key
// key and, when set, idempotency key idem, within 10 s, and returns how
// many events cfgd accepted.
func Report(ctx context.Context, c ingestv1.IngestServiceClient, key, idem string, evs []*ingestv1.Event) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md := []string{"x-api-key", key}
	if idem != "" {
		md = append(md, "idempotency-key", idem)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	st, err := c.Report(ctx)
	if err != nil {
		return 0, err
	}
	if err := st.Send(&ingestv1.ReportRequest{Events: evs}); err != nil {
		// The answer says why.
		_, err = st.CloseAndRecv()
		return 0, err
	}
	res, err := st.CloseAndRecv()
	if err != nil {
		return 0, err
	}
	return res.GetAccepted(), nil
}

// TraceID and SpanID are ids derived from s (a request id), so an
// export's spans are told apart and found again by it.
func TraceID(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:16] }

// SpanID: see TraceID.
func SpanID(s string) []byte { h := sha256.Sum256([]byte(s + "s")); return h[:8] }

// OTLPTraces is an OTLP trace export of one successful gRPC SERVER span
// of service/method per id (its x-request-id attribute), from resource
// (its service.name), the i-th span lasting i ms from now: each span one
// request log in cfgd (docs/otlp.md).
func OTLPTraces(resource, service, method string, ids []string, now time.Time) *coltracepb.ExportTraceServiceRequest {
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	spans := make([]*tracepb.Span, len(ids))
	for i, rid := range ids {
		spans[i] = &tracepb.Span{TraceId: TraceID(rid), SpanId: SpanID(rid), Name: service + "/" + method, Kind: tracepb.Span_SPAN_KIND_SERVER,
			StartTimeUnixNano: uint64(now.UnixNano()), EndTimeUnixNano: uint64(now.Add(time.Duration(i) * time.Millisecond).UnixNano()),
			Attributes: []*commonpb.KeyValue{
				str("rpc.system", "grpc"), str("rpc.service", service), str("rpc.method", method),
				{Key: "rpc.grpc.status_code", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 0}}},
				str("x-request-id", rid),
			}}
	}
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", resource)}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
	}}}
}
