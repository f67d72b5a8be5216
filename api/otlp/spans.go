package otlp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/grpc/codes"

	"github.com/cfgd/cfgd/deploy/clip"
	"github.com/cfgd/cfgd/events/requestlog"
)

// Attribute keys read from a span. otelgrpc v0.65 and later write the
// stable RPC conventions (rpc.system.name, rpc.method "pkg.Service/Method",
// rpc.response.status_code "NOT_FOUND"); v0.64 and earlier, and
// OTEL_SEMCONV_STABILITY_OPT_IN=rpc/old, the old ones (rpc.system,
// rpc.service, a bare rpc.method, an integer rpc.grpc.status_code);
// rpc/dup both. Every form is read.
const (
	attrSystemName     = "rpc.system.name"
	attrSystemOld      = "rpc.system"
	attrMethod         = "rpc.method"
	attrMethodOriginal = "rpc.method_original"
	attrServiceOld     = "rpc.service"
	attrStatusCode     = "rpc.response.status_code"
	attrStatusCodeOld  = "rpc.grpc.status_code"
)

// clientAddressKeys are where a SERVER span may name its caller, best
// first: client.address is the original client (behind a proxy), the
// network peer is the connection's other end; net.sock.peer.addr and
// net.peer.ip are their names before semantic conventions 1.21.
var clientAddressKeys = [...]string{"client.address", "network.peer.address", "net.sock.peer.addr", "net.peer.ip"}

// requestIDKeys are where a span may carry the caller's x-request-id: as
// its own attribute, or as the request metadata attribute of the new
// (rpc.request.metadata.<key>) and old (rpc.grpc.request.metadata.<key>)
// conventions.
var requestIDKeys = [...]string{"x-request-id", "rpc.request.metadata.x-request-id", "rpc.grpc.request.metadata.x-request-id"}

// errNotRequest marks a span that is not a request log: not a SERVER
// span, or not of a gRPC call. Such a span is ignored, not rejected.
var errNotRequest = errors.New("not the server span of a gRPC call")

// FromSpan is the request-log event of span: the SERVER span of one gRPC
// call. A CLIENT span, or a span of anything but a gRPC call, is no
// request (errNotRequest): a service instrumented on both sides is
// counted once, by the server. Any other error says why a gRPC server
// span cannot be a request log.
func FromSpan(span ptrace.Span) (requestlog.Event, error) {
	attrs := span.Attributes()
	if span.Kind() != ptrace.SpanKindServer || (str(attrs, attrSystemName) != "grpc" && str(attrs, attrSystemOld) != "grpc") {
		return requestlog.Event{}, errNotRequest
	}
	service, method, err := serviceMethod(span.Name(), attrs)
	if err != nil {
		return requestlog.Event{}, err
	}
	code, err := statusCode(attrs)
	if err != nil {
		return requestlog.Event{}, err
	}
	// The JSON ingest's bounds on duration_ms, checked on the
	// timestamps as sent (unsigned: converted to times first, an end of
	// 2^64-1 would wrap to 1969 and FromCall would clamp what is left).
	// A start beyond 2105 fails created_at's bound in validation.
	start, end := span.StartTimestamp(), span.EndTimestamp()
	switch {
	case start == 0:
		return requestlog.Event{}, errors.New("the span has no start time")
	case end < start:
		return requestlog.Event{}, errors.New("duration_ms: the span ends before it starts")
	case uint64(end-start)/uint64(time.Millisecond) > uint64(requestlog.MaxDurationMS):
		return requestlog.Event{}, fmt.Errorf("duration_ms: the span lasts longer than a week (%d ms at most)", requestlog.MaxDurationMS)
	}
	c := requestlog.Call{
		FullMethod: "/" + service + "/" + method, Code: uint32(code), Message: span.Status().Message(),
		Start: start.AsTime(), RequestID: requestID(span),
	}
	c.End = c.Start.Add(time.Duration(end - start))
	for _, k := range clientAddressKeys {
		if a := str(attrs, k); a != "" {
			c.Peer = a
			break
		}
	}
	// The span status is not the source of the code: otelgrpc leaves it
	// unset for NOT_FOUND, CANCELLED and other codes it deems the
	// client's; its message is the error text all the same.
	return requestlog.FromCall(c), nil
}

// serviceMethod reads the gRPC service and method from rpc.method
// ("pkg.Service/Method", new), rpc.service with a bare rpc.method (old),
// or the span name otelgrpc gives ("pkg.Service/Method").
func serviceMethod(name string, attrs pcommon.Map) (string, string, error) {
	m := str(attrs, attrMethod)
	if m == "_OTHER" {
		// The new conventions' name for a method the server does not
		// know; the method as called is kept beside it.
		m = str(attrs, attrMethodOriginal)
	}
	if s, meth, ok := splitFull(m); ok {
		return s, meth, nil
	}
	if s := str(attrs, attrServiceOld); s != "" && m != "" {
		return s, m, nil
	}
	if s, meth, ok := splitFull(name); ok {
		return s, meth, nil
	}
	return "", "", fmt.Errorf("no gRPC service and method: neither %s %q, %s with %s, nor a span name %q",
		attrMethod, "pkg.Service/Method", attrServiceOld, attrMethod, "pkg.Service/Method")
}

// splitFull splits "pkg.Service/Method" (a leading slash allowed).
func splitFull(full string) (string, string, bool) {
	full = strings.TrimPrefix(full, "/")
	i := strings.LastIndexByte(full, '/')
	if i <= 0 || i == len(full)-1 {
		return "", "", false
	}
	return full[:i], full[i+1:], true
}

// statusCode reads the gRPC status code: rpc.response.status_code (new: a
// canonical name such as "NOT_FOUND"), else rpc.grpc.status_code (old: an
// integer). Either may come as a name, an integer or a numeric string.
func statusCode(attrs pcommon.Map) (codes.Code, error) {
	for _, k := range [...]string{attrStatusCode, attrStatusCodeOld} {
		v, ok := attrs.Get(k)
		if !ok {
			continue
		}
		var raw string
		switch v.Type() {
		case pcommon.ValueTypeInt:
			raw = strconv.FormatInt(v.Int(), 10)
		case pcommon.ValueTypeStr:
			raw = strconv.Quote(v.Str())
			if _, err := strconv.ParseUint(v.Str(), 10, 32); err == nil {
				raw = v.Str()
			}
		default:
			return 0, fmt.Errorf("%s must be a status code name or integer, not %s", k, v.Type())
		}
		// grpc's own reader of canonical names ("NOT_FOUND") and numbers.
		var c codes.Code
		if err := c.UnmarshalJSON([]byte(raw)); err != nil {
			return 0, fmt.Errorf("%s %s is not a gRPC status code", k, trunc(v.AsString()))
		}
		return c, nil
	}
	return 0, fmt.Errorf("no gRPC status code (%s or %s)", attrStatusCode, attrStatusCodeOld)
}

// requestID is the caller's x-request-id when the span carries one, else
// the span's own identity: trace id and span id.
func requestID(span ptrace.Span) string {
	for _, k := range requestIDKeys {
		v, ok := span.Attributes().Get(k)
		if !ok {
			continue
		}
		if v.Type() == pcommon.ValueTypeSlice {
			if v.Slice().Len() == 0 {
				continue
			}
			v = v.Slice().At(0)
		}
		if s := v.AsString(); s != "" {
			return s
		}
	}
	return span.TraceID().String() + "-" + span.SpanID().String()
}

func str(attrs pcommon.Map, key string) string {
	if v, ok := attrs.Get(key); ok && v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return ""
}

// trunc is a client's string quoted in a rejection: short, and valid
// UTF-8, as partial_success.error_message must be.
func trunc(s string) string { return clip.Abbrev(s, 32) }
