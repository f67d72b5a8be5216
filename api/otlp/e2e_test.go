package otlp_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cfgd/cfgd/api/otlp"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// echo serves Get and Put of service name, each answering the status
// code its request names ("0", "5", ...).
func echo(name string) *grpc.ServiceDesc {
	h := func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := &wrapperspb.StringValue{}
		if err := dec(in); err != nil {
			return nil, err
		}
		var c codes.Code
		if err := c.UnmarshalJSON([]byte(in.Value)); err != nil {
			return nil, err
		}
		if c == codes.OK {
			return in, nil
		}
		return nil, status.Error(c, "made to answer "+in.Value)
	}
	return &grpc.ServiceDesc{ServiceName: name, HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: h}, {MethodName: "Put", Handler: h}}}
}

// calls are the calls each case makes: method and code, how many times.
var calls = []struct {
	method string
	code   codes.Code
	n      int
}{
	{"Get", codes.OK, 3}, {"Get", codes.NotFound, 2},
	{"Put", codes.OK, 1}, {"Put", codes.DeadlineExceeded, 1}, {"Put", codes.Canceled, 1}, {"Put", codes.Internal, 1},
}

// A service instrumented with otelgrpc on both sides exports its spans
// to cfgd over OTLP/gRPC and OTLP/HTTP, with otelgrpc writing the new,
// old and both semantic conventions; the request log then holds exactly
// the calls made (the server spans; client spans are not counted again),
// per method and status code, and the statistics count them.
func TestOpenTelemetrySDKExportsBecomeRequestLogs(t *testing.T) {
	// Not parallel: otelgrpc reads OTEL_SEMCONV_STABILITY_OPT_IN from the
	// environment, which t.Setenv sets for this test alone.
	e := grpctest.StartWith(t, grpctest.Options{RequestLog: true})
	admin := authtest.Email("otlp-admin")
	e.Superuser(t, admin, "admin password 1")
	key := e.NewKey(t, "otlp-key", apikey.TypeService, admin, nil)
	headers := map[string]string{"x-api-key": key.Key}

	t.Run("grpc answers", func(t *testing.T) {
		client := ptraceotlp.NewGRPCClient(e.Conn)
		td := traces(2, func(i int, s ptrace.Span) {
			s.SetName("e2e.answers.v1.Echo/Get")
			if i == 1 {
				s.Attributes().Remove("rpc.grpc.status_code")
			}
		})
		req := ptraceotlp.NewExportRequestFromTraces(td)
		ctx := context.Background()
		if _, err := client.Export(ctx, req); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("without a key: %v, want Unauthenticated", err)
		}
		if _, err := client.Export(metadata.AppendToOutgoingContext(ctx, "x-api-key", "cfgd_wrong"), req); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("wrong key: %v, want Unauthenticated", err)
		}
		res, err := client.Export(metadata.AppendToOutgoingContext(ctx, "x-api-key", key.Key), req)
		if err != nil {
			t.Fatal(err)
		}
		if ps := res.PartialSuccess(); ps.RejectedSpans() != 1 || !strings.Contains(ps.ErrorMessage(), "no gRPC status code") {
			t.Fatalf("partial success %d %q, want 1 rejected span without a status code", ps.RejectedSpans(), ps.ErrorMessage())
		}
		waitRequests(t, e, requestlogview.Filter{Service: "e2e.answers.v1.Echo"}, 1)
	})

	cases := []struct {
		name, semconv, exporter string
	}{
		{"grpc-new", "", "grpc"},
		{"http-new", "", "http"},
		{"http-old", "rpc/old", "http"},
		{"grpc-dup", "rpc/dup", "grpc"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_SEMCONV_STABILITY_OPT_IN", tc.semconv)
			ctx := context.Background()
			var (
				exp sdktrace.SpanExporter
				err error
			)
			if tc.exporter == "grpc" {
				exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(e.GRPCAddr), otlptracegrpc.WithInsecure(),
					otlptracegrpc.WithHeaders(headers), otlptracegrpc.WithCompressor("gzip"), otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}))
			} else {
				exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(e.URL+"/v1/traces"), otlptracehttp.WithHeaders(headers),
					otlptracehttp.WithCompression(otlptracehttp.GzipCompression), otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
			}
			if err != nil {
				t.Fatal(err)
			}
			// One batch, sent by ForceFlush: the export's outcome is its
			// error.
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)))
			service := "e2e." + strings.ReplaceAll(tc.name, "-", "") + ".v1.Echo"

			srv := grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))
			srv.RegisterService(echo(service), struct{}{})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(srv.Stop)
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })

			want := map[string]int{} // "method code" -> calls
			total := 0
			for _, c := range calls {
				for range c.n {
					err := conn.Invoke(ctx, "/"+service+"/"+c.method, &wrapperspb.StringValue{Value: strconv.Itoa(int(c.code))}, &wrapperspb.StringValue{})
					if status.Code(err) != c.code {
						t.Fatalf("%s %v: %v", c.method, c.code, err)
					}
				}
				want[fmt.Sprintf("%s %s", c.method, requestlog.CodeName(uint32(c.code)))] += c.n
				total += c.n
			}
			// ForceFlush returns the exporter's error: cfgd must take the
			// export (2xx / OK), client spans and all.
			if err := tp.ForceFlush(ctx); err != nil {
				t.Fatalf("export to cfgd: %v", err)
			}
			if err := tp.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}

			got := waitRequests(t, e, requestlogview.Filter{Service: service}, total)
			counts := map[string]int{}
			for _, r := range got {
				counts[r.MethodName+" "+r.GRPCStatusCode]++
				if r.ClientIP != "" && r.ClientIP != "127.0.0.1" {
					t.Errorf("client address %q", r.ClientIP)
				}
				if time.Since(r.CreatedAt) > time.Minute || r.RequestID == "" {
					t.Errorf("logged as %+v", r)
				}
				// otelgrpc sets the span status, whose message is the
				// error text, only for the codes it deems the server's.
				serverFault := r.GRPCStatusCode == requestlog.CodeName(uint32(codes.DeadlineExceeded)) || r.GRPCStatusCode == requestlog.CodeName(uint32(codes.Internal))
				if serverFault != (r.ErrorMessage != "") {
					t.Errorf("%s %s: error message %q", r.MethodName, r.GRPCStatusCode, r.ErrorMessage)
				}
			}
			// All spans of one flush went in one export, so one produce:
			// had client spans been counted, they would be here already.
			if !maps.Equal(counts, want) {
				t.Fatalf("request log per method and code:\n got %v\nwant %v", counts, want)
			}
			// The rollups behind the statistics fill in the same insert,
			// and may show it a moment after the raw table.
			type stat struct{ total, ok, failed int64 }
			wantStats := map[string]stat{"Get": {5, 3, 2}, "Put": {4, 1, 3}}
			var gotStats map[string]stat
			deadline := time.Now().Add(30 * time.Second)
			for !maps.Equal(gotStats, wantStats) && time.Now().Before(deadline) {
				methods, err := e.Requests.Methods(ctx, 1, service)
				if err != nil {
					t.Fatal(err)
				}
				gotStats = map[string]stat{}
				for _, m := range methods {
					gotStats[m.MethodName] = stat{m.TotalRequests, m.SuccessfulRequests, m.FailedRequests}
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !maps.Equal(gotStats, wantStats) {
				t.Fatalf("method statistics (total, successful, failed) %v, want %v", gotStats, wantStats)
			}
		})
	}
	// cfgd does not report its own Export calls: they carry request logs.
	if rs, n, err := e.Requests.Requests(context.Background(), requestlogview.Filter{Service: otlp.ServiceName}); err != nil || n != 0 {
		t.Errorf("export calls logged: %d %+v %v", n, rs, err)
	}
}

// waitRequests waits (a minute at most: the sink's consumer group may
// take seconds to join on a loaded machine) until the read model lists at
// least n requests matching f, and returns them.
func waitRequests(t *testing.T, e *grpctest.Env, f requestlogview.Filter, n int) []requestlogview.Request {
	t.Helper()
	f.PageSize = requestlogview.MaxPageSize
	deadline := time.Now().Add(60 * time.Second)
	for {
		rs, _, err := e.Requests.Requests(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) >= n {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests %+v: %d listed, want %d", f, len(rs), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With Kafka down the export fails with UNAVAILABLE and a RetryInfo, which
// OTLP exporters retry (after the delay it says), rather than a code that
// makes them drop the spans.
func TestGRPCExportWhileKafkaIsDownIsRetryable(t *testing.T) {
	t.Parallel()
	e := grpctest.StartWith(t, grpctest.Options{RequestLog: true, KafkaDown: true})
	admin := authtest.Email("otlp-down")
	e.Superuser(t, admin, "admin password 1")
	key := e.NewKey(t, "otlp-down-key", apikey.TypeService, admin, nil)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key.Key)
	_, err := ptraceotlp.NewGRPCClient(e.Conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(traces(1, nil)))
	st := status.Convert(err)
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if st.Code() != codes.Unavailable || retry == nil || retry.GetRetryDelay().AsDuration() <= 0 {
		t.Fatalf("export with Kafka down: %v (details %v), want UNAVAILABLE with a RetryInfo", err, st.Details())
	}
}
