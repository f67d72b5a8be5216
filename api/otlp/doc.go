// Package otlp receives OpenTelemetry traces (OTLP/gRPC TraceService/Export
// on cfgd's gRPC port, OTLP/HTTP POST /v1/traces on its HTTP port) and
// turns the SERVER span of each gRPC call into one request-log event, so a
// service instrumented with otelgrpc needs no cfgd reporter. Decoding is
// the OpenTelemetry collector's pdata (ptraceotlp), which reads the
// specification's JSON (hex trace and span ids) as the specification says.
// A body is first counted against the bounds (bounds.go, boundsjson.go)
// without being decoded, so what decoding allocates follows the bounds,
// not the body.
// The mapping is in spans.go and docs/otlp.md; the events take the request
// log's one accept path (Accepter).
package otlp
