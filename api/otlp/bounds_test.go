package otlp_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/ptrace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/api/otlp"
	"github.com/cfgd/cfgd/events/requestlog"
)

// authn is the gRPC server's authenticator: the HTTP side's keys, and no
// valid access token.
type authn struct{ keys }

func (authn) Bearer(context.Context, string) (grpcserver.Principal, error) {
	return grpcserver.Principal{}, grpcserver.ErrUnauthenticated
}

func (a authn) RecheckAPIKey(ctx context.Context, raw string) error {
	_, err := a.APIKey(ctx, raw)
	return err
}

// grpcReceiver serves the receiver on a gRPC server of its own (the
// server's interceptors, default limits) and returns a client of it.
func grpcReceiver(t *testing.T, p *producer) *grpc.ClientConn {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	srv, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}, log, authn{})
	if err != nil {
		t.Fatal(err)
	}
	otlp.New(otlp.ViaIngest{Ingest: &requestlog.Accepter{Produce: p.Produce, Now: time.Now}}, keys{}, log).RegisterGRPC(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient(<-srv.Started(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

const exportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// exportRaw sends body, an ExportTraceServiceRequest's bytes as they are,
// gzip-compressed, as an OTLP exporter with compression does.
func exportRaw(ctx context.Context, conn *grpc.ClientConn, body []byte) ([]byte, error) {
	in, out := new(emptypb.Empty), new(emptypb.Empty)
	in.ProtoReflect().SetUnknown(body)
	err := conn.Invoke(ctx, exportMethod, in, out, grpc.UseCompressor(gzip.Name))
	return out.ProtoReflect().GetUnknown(), err
}

// Hostile bodies, built on the wire: a few kilobytes of gzip each.
func msg(num protowire.Number, inner []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), inner)
}

// emptySpans is an export of n empty spans (2 bytes each).
func emptySpans(n int) []byte {
	return msg(1, msg(2, bytes.Repeat([]byte{0x12, 0x00}, n)))
}

// emptyAttributes is an export of one span with n empty attributes.
func emptyAttributes(n int) []byte {
	return msg(1, msg(2, msg(2, bytes.Repeat([]byte{0x4a, 0x00}, n))))
}

func jsonEmptySpans(n int) []byte {
	return []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{}` + strings.Repeat(`,{}`, n-1) + `]}]}]}`)
}

// jsonDeep is an export of one span whose one attribute nests arrays n
// levels deep.
func jsonDeep(n int) []byte {
	return []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"a","value":` +
		strings.Repeat(`{"arrayValue":{"values":[`, n) + strings.Repeat(`]}}`, n) + `}]}]}]}]}`)
}

// allocated is what the process allocates while f runs (server and
// client are both in it; the client's share is about the body, twice).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// An export is checked against the bounds before it is decoded, and a
// gRPC caller without credentials before anything of its message is: a
// few kilobytes of gzip that decode to millions of spans or attributes
// cost the server about the inflated body, not hundreds of megabytes
// (2,090,000 empty spans decoded: some 300 MB). Not parallel: it counts
// the process's allocations.
func TestHostileExportsAreRefusedBeforeDecoding(t *testing.T) {
	const most = 48 << 20 // the bodies are at most 8 MiB inflated
	p := &producer{}
	srv := server(t, p)
	conn := grpcReceiver(t, p)
	post := func(body []byte, typ string) func() string {
		return func() string {
			req, err := http.NewRequest(http.MethodPost, srv.URL+otlp.Path, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", typ)
			req.Header.Set("Content-Encoding", "gzip")
			req.Header.Set("x-api-key", "good")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			return "http " + strconv.Itoa(res.StatusCode)
		}
	}
	export := func(ctx context.Context, body []byte) func() string {
		return func() string {
			_, err := exportRaw(ctx, conn, body)
			return "grpc " + status.Code(err).String()
		}
	}
	withKey := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "good")
	spans := emptySpans(2_090_000) // 4.18 MB: within gRPC's 4 MiB
	// The bodies are built before anything is counted.
	cases := []struct {
		name string
		call func() string
		want string
	}{
		{"grpc, no credentials, 2,090,000 empty spans", export(context.Background(), spans), "grpc Unauthenticated"},
		{"grpc, a key, 2,090,000 empty spans", export(withKey, spans), "grpc InvalidArgument"},
		{"http, 4,190,000 empty spans", post(gz(emptySpans(4_190_000)), pb), "http 413"},
		{"http, one span of 4,190,000 empty attributes", post(gz(emptyAttributes(4_190_000)), pb), "http 413"},
		{"http, 2,790,000 {} spans in JSON", post(gz(jsonEmptySpans(2_790_000)), js), "http 413"},
		{"http, an attribute nested 280,000 levels in JSON", post(gz(jsonDeep(280_000)), js), "http 400"},
	}
	for _, tc := range cases {
		var got string
		n := allocated(func() { got = tc.call() })
		t.Logf("%s: %s, %.1f MB allocated", tc.name, got, float64(n)/1e6)
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
		if n > most {
			t.Errorf("%s: %.1f MB allocated, want at most %d MB", tc.name, float64(n)/1e6, most>>20)
		}
	}
	if len(p.events) != 0 {
		t.Errorf("%d events produced", len(p.events))
	}
}

// A rejection quotes the span's name and status value cut to 32 bytes,
// on a character boundary: partial_success.error_message stays UTF-8,
// which the exporters' own types (protobuf-go) insist on when they decode
// the answer; before, otlptracegrpc failed the export with Internal.
func TestRejectionsStayUTF8(t *testing.T) {
	t.Parallel()
	p := &producer{}
	conn := grpcReceiver(t, p)
	name := "x.v1." + strings.Repeat("a", 26) + "é.Svc/Get" // é is bytes 31 and 32
	code := strings.Repeat("b", 30) + "€€"                  // the first € is bytes 30 to 32
	td := traces(2, func(i int, s ptrace.Span) {
		s.SetName(name)
		s.Attributes().Remove("rpc.grpc.status_code")
		if i == 0 {
			s.Attributes().PutStr("rpc.grpc.status_code", code)
		}
	})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "good")
	b, err := exportRaw(ctx, conn, protobuf(t, td))
	if err != nil {
		t.Fatal(err)
	}
	var res coltracepb.ExportTraceServiceResponse
	if err := proto.Unmarshal(b, &res); err != nil {
		t.Fatalf("the answer does not decode as the exporters decode it: %v", err)
	}
	msg := res.GetPartialSuccess().GetErrorMessage()
	if res.GetPartialSuccess().GetRejectedSpans() != 2 || !utf8.ValidString(msg) ||
		!strings.Contains(msg, "x.v1."+strings.Repeat("a", 26)+"...") || !strings.Contains(msg, strings.Repeat("b", 30)+"...") {
		t.Fatalf("partial success %v, want 2 spans rejected, quoted cut before the é and the €", res.GetPartialSuccess())
	}
}
