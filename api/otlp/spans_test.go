package otlp

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/grpc/codes"

	"github.com/cfgd/cfgd/events/requestlog"
)

var (
	start   = time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	traceID = pcommon.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	spanID  = pcommon.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
)

// spanOf is a span of kind k named name, 42ms long, with attrs.
func spanOf(k ptrace.SpanKind, name string, attrs map[string]any, msg string) ptrace.Span {
	s := ptrace.NewSpan()
	s.SetKind(k)
	s.SetName(name)
	s.SetTraceID(traceID)
	s.SetSpanID(spanID)
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(42 * time.Millisecond)))
	s.Status().SetMessage(msg)
	if err := s.Attributes().FromRaw(attrs); err != nil {
		panic(err)
	}
	return s
}

// event is what the mapping should give for a call of pkg.v1.Svc/Get.
func event(code codes.Code, status, msg string, change ...func(*requestlog.Event)) requestlog.Event {
	e := requestlog.Event{
		RequestID: "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", ServiceName: "pkg.v1.Svc", MethodName: "Get",
		Status: status, GRPCStatusCode: requestlog.CodeName(uint32(code)), ErrorMessage: msg, DurationMS: 42, CreatedAt: start,
	}
	for _, c := range change {
		c(&e)
	}
	return e
}

func TestFromSpanSemanticConventions(t *testing.T) {
	t.Parallel()
	server := ptrace.SpanKindServer
	tests := []struct {
		name  string
		kind  ptrace.SpanKind
		span  string
		attrs map[string]any
		msg   string
		want  requestlog.Event
	}{
		{"new (otelgrpc v0.65+): NOT_FOUND is an error though the span status is unset", server, "pkg.v1.Svc/Get",
			map[string]any{"rpc.system.name": "grpc", "rpc.method": "pkg.v1.Svc/Get", "rpc.response.status_code": "NOT_FOUND"}, "no such thing",
			event(codes.NotFound, "error", "no such thing")},
		{"new: OK is success, and a status message is no error", server, "pkg.v1.Svc/Get",
			map[string]any{"rpc.system.name": "grpc", "rpc.method": "pkg.v1.Svc/Get", "rpc.response.status_code": "OK"}, "ignored",
			event(codes.OK, "success", "")},
		{"old (v0.64, rpc/old): rpc.service, bare rpc.method, integer code; DEADLINE_EXCEEDED is a timeout", server, "pkg.v1.Svc/Get",
			map[string]any{"rpc.system": "grpc", "rpc.service": "pkg.v1.Svc", "rpc.method": "Get", "rpc.grpc.status_code": int64(4)}, "slow",
			event(codes.DeadlineExceeded, "timeout", "slow")},
		{"dup (rpc/dup): both sets; CANCELLED is cancelled", server, "pkg.v1.Svc/Get",
			map[string]any{"rpc.system": "grpc", "rpc.system.name": "grpc", "rpc.service": "pkg.v1.Svc", "rpc.method": "pkg.v1.Svc/Get",
				"rpc.response.status_code": "CANCELLED", "rpc.grpc.status_code": int64(1)}, "gone",
			event(codes.Canceled, "cancelled", "gone")},
		{"dup with the old bare method kept: service from rpc.service", server, "pkg.v1.Svc/Get",
			map[string]any{"rpc.system": "grpc", "rpc.system.name": "grpc", "rpc.service": "pkg.v1.Svc", "rpc.method": "Get",
				"rpc.response.status_code": "INTERNAL", "rpc.grpc.status_code": int64(13)}, "boom",
			event(codes.Internal, "error", "boom")},
		{"method from the span name when no attribute names it", server, "pkg.v1.Svc/Get",
			map[string]any{"rpc.system.name": "grpc", "rpc.response.status_code": "UNAVAILABLE"}, "",
			event(codes.Unavailable, "error", "")},
		{"_OTHER: the method as called", server, "pkg.v1.Svc/Get",
			map[string]any{"rpc.system.name": "grpc", "rpc.method": "_OTHER", "rpc.method_original": "pkg.v1.Svc/Get", "rpc.response.status_code": "UNIMPLEMENTED"}, "",
			event(codes.Unimplemented, "error", "")},
		{"code as a numeric string", server, "pkg.v1.Svc/Get",
			map[string]any{"rpc.system": "grpc", "rpc.method": "pkg.v1.Svc/Get", "rpc.grpc.status_code": "16"}, "who",
			event(codes.Unauthenticated, "error", "who")},
		{"x-request-id attribute and client.address over the network peer", server, "pkg.v1.Svc/Get",
			map[string]any{"rpc.system.name": "grpc", "rpc.method": "pkg.v1.Svc/Get", "rpc.response.status_code": "OK",
				"x-request-id": "req-1", "client.address": "10.0.0.7", "network.peer.address": "10.9.9.9"}, "",
			event(codes.OK, "success", "", func(e *requestlog.Event) { e.RequestID, e.ClientIP = "req-1", "10.0.0.7" })},
		{"request metadata attribute (a string list) and the old socket peer", server, "pkg.v1.Svc/Get",
			map[string]any{"rpc.system": "grpc", "rpc.method": "pkg.v1.Svc/Get", "rpc.grpc.status_code": int64(0),
				"rpc.grpc.request.metadata.x-request-id": []any{"req-2"}, "net.sock.peer.addr": "::ffff:10.1.1.1"}, "",
			event(codes.OK, "success", "", func(e *requestlog.Event) { e.RequestID, e.ClientIP = "req-2", "10.1.1.1" })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := FromSpan(spanOf(server, tc.span, tc.attrs, tc.msg))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			if errs := requestlog.Check(0, got); len(errs) > 0 {
				t.Fatalf("the event fails validation: %v", errs)
			}
		})
	}
}

func TestFromSpanIgnoresWhatIsNoRequest(t *testing.T) {
	t.Parallel()
	grpcAttrs := map[string]any{"rpc.system.name": "grpc", "rpc.method": "pkg.v1.Svc/Get", "rpc.response.status_code": "OK"}
	tests := []struct {
		name  string
		kind  ptrace.SpanKind
		attrs map[string]any
	}{
		{"client span of the same call", ptrace.SpanKindClient, grpcAttrs},
		{"internal span", ptrace.SpanKindInternal, grpcAttrs},
		{"unspecified kind", ptrace.SpanKindUnspecified, grpcAttrs},
		{"http server span", ptrace.SpanKindServer, map[string]any{"http.request.method": "GET", "http.response.status_code": int64(200)}},
		{"another RPC system", ptrace.SpanKindServer, map[string]any{"rpc.system.name": "jsonrpc", "rpc.method": "pkg.v1.Svc/Get"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := FromSpan(spanOf(tc.kind, "pkg.v1.Svc/Get", tc.attrs, "")); !errors.Is(err, errNotRequest) {
				t.Fatalf("err %v, want errNotRequest", err)
			}
		})
	}
}

func TestFromSpanRejectsWhatCannotBeMapped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, span string
		attrs      map[string]any
		change     func(ptrace.Span)
		want       string
	}{
		{"no status code", "pkg.v1.Svc/Get", map[string]any{"rpc.system.name": "grpc", "rpc.method": "pkg.v1.Svc/Get"}, nil, "no gRPC status code"},
		{"unknown code name", "pkg.v1.Svc/Get", map[string]any{"rpc.system.name": "grpc", "rpc.method": "pkg.v1.Svc/Get", "rpc.response.status_code": "NOPE"}, nil, "is not a gRPC status code"},
		{"code out of range", "pkg.v1.Svc/Get", map[string]any{"rpc.system": "grpc", "rpc.method": "pkg.v1.Svc/Get", "rpc.grpc.status_code": int64(99)}, nil, "is not a gRPC status code"},
		{"code of the wrong type", "pkg.v1.Svc/Get", map[string]any{"rpc.system": "grpc", "rpc.method": "pkg.v1.Svc/Get", "rpc.grpc.status_code": true}, nil, "must be a status code name or integer"},
		{"no service", "Get", map[string]any{"rpc.system.name": "grpc", "rpc.method": "Get", "rpc.response.status_code": "OK"}, nil, "no gRPC service and method"},
		{"ends before it starts", "pkg.v1.Svc/Get", map[string]any{"rpc.system.name": "grpc", "rpc.response.status_code": "OK"},
			func(s ptrace.Span) { s.SetEndTimestamp(s.StartTimestamp() - 1) }, "ends before it starts"},
		{"no start", "pkg.v1.Svc/Get", map[string]any{"rpc.system.name": "grpc", "rpc.response.status_code": "OK"},
			func(s ptrace.Span) { s.SetStartTimestamp(0) }, "no start time"},
		// The JSON ingest's bounds on duration_ms (0 to a week), not a
		// wrapped end (2^64-1 is 1969 as a time) or a clamped duration.
		{"end at 2^64-1", "pkg.v1.Svc/Get", map[string]any{"rpc.system.name": "grpc", "rpc.response.status_code": "OK"},
			func(s ptrace.Span) { s.SetEndTimestamp(math.MaxUint64) }, "longer than a week"},
		{"ten days long", "pkg.v1.Svc/Get", map[string]any{"rpc.system.name": "grpc", "rpc.response.status_code": "OK"},
			func(s ptrace.Span) { s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(10 * 24 * time.Hour))) }, "longer than a week"},
		{"a week and a millisecond", "pkg.v1.Svc/Get", map[string]any{"rpc.system.name": "grpc", "rpc.response.status_code": "OK"},
			func(s ptrace.Span) {
				s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(7*24*time.Hour + time.Millisecond)))
			}, "longer than a week"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := spanOf(ptrace.SpanKindServer, tc.span, tc.attrs, "")
			if tc.change != nil {
				tc.change(s)
			}
			_, err := FromSpan(s)
			if err == nil || errors.Is(err, errNotRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// A span of a week is taken (the JSON ingest's longest duration_ms); one
// starting past 2^63 ns, which wraps before 1970 as a time, fails the
// ingest's created_at bound like a JSON event of that date.
func TestFromSpanTimestampBounds(t *testing.T) {
	t.Parallel()
	attrs := map[string]any{"rpc.system.name": "grpc", "rpc.method": "pkg.v1.Svc/Get", "rpc.response.status_code": "OK"}
	s := spanOf(ptrace.SpanKindServer, "pkg.v1.Svc/Get", attrs, "")
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(7 * 24 * time.Hour)))
	e, err := FromSpan(s)
	if err != nil || e.DurationMS != requestlog.MaxDurationMS || len(requestlog.Check(0, e)) != 0 {
		t.Fatalf("a week: %+v, %v; want duration_ms %d and valid", e, err, requestlog.MaxDurationMS)
	}
	s.SetStartTimestamp(math.MaxUint64 - 1000)
	s.SetEndTimestamp(math.MaxUint64)
	e, err = FromSpan(s)
	if err != nil {
		t.Fatal(err)
	}
	if problems := requestlog.Check(0, e); len(problems) != 1 || problems[0].Field != "created_at" {
		t.Fatalf("start at 2^64-1001: %v, want created_at refused", problems)
	}
}
