package otlp_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/api/otlp"
	"github.com/cfgd/cfgd/events/requestlog"
)

// producer keeps what it is given, or fails as Kafka down does.
type producer struct {
	mu     sync.Mutex
	events []requestlog.Event
	down   bool
}

func (p *producer) Produce(_ context.Context, events []requestlog.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return fmt.Errorf("%w: broker unreachable", requestlog.ErrUnavailable)
	}
	p.events = append(p.events, events...)
	return nil
}

// keys knows the key "good"; "down" is its store failing.
type keys struct{}

func (keys) APIKey(_ context.Context, raw string) (grpcserver.Principal, error) {
	switch raw {
	case "good":
		return grpcserver.Principal{KeyID: 1, Via: grpcserver.ViaAPIKey}, nil
	case "down":
		return grpcserver.Principal{}, errors.New("postgres down")
	}
	return grpcserver.Principal{}, fmt.Errorf("%w: unknown key", grpcserver.ErrUnauthenticated)
}

func server(t *testing.T, p *producer) *httptest.Server {
	t.Helper()
	r := mux.NewRouter()
	otlp.New(otlp.ViaIngest{Ingest: &requestlog.Accepter{Produce: p.Produce, Now: time.Now}}, keys{}, slog.New(slog.DiscardHandler)).Mount(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

// specJSON is an export in the OTLP JSON encoding, ids in hex as the
// specification writes them: one gRPC server span (NOT_FOUND), and the
// client span of the same call, which is no request.
const specJSON = `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"shop"}}]},
"scopeSpans":[{"scope":{"name":"otelgrpc"},"spans":[
 {"traceId":"5B8EFFF798038103D269B633813FC60C","spanId":"EEE19B7EC3C1B174","name":"shop.v1.Cart/Get","kind":2,
  "startTimeUnixNano":"1544712660000000000","endTimeUnixNano":"1544712660250000000",
  "attributes":[{"key":"rpc.system.name","value":{"stringValue":"grpc"}},{"key":"rpc.method","value":{"stringValue":"shop.v1.Cart/Get"}},
   {"key":"rpc.response.status_code","value":{"stringValue":"NOT_FOUND"}},{"key":"network.peer.address","value":{"stringValue":"10.0.0.9"}}],
  "status":{}},
 {"traceId":"5B8EFFF798038103D269B633813FC60C","spanId":"AAA19B7EC3C1B174","name":"shop.v1.Cart/Get","kind":3,
  "startTimeUnixNano":"1544712660000000000","endTimeUnixNano":"1544712660300000000",
  "attributes":[{"key":"rpc.system.name","value":{"stringValue":"grpc"}},{"key":"rpc.method","value":{"stringValue":"shop.v1.Cart/Get"}},
   {"key":"rpc.response.status_code","value":{"stringValue":"NOT_FOUND"}}]}
]}]}]}`

// traces builds an export of n gRPC server spans, each changed by fix.
func traces(n int, fix func(i int, s ptrace.Span)) ptrace.Traces {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	start := time.Now().Add(-time.Minute)
	for i := range n {
		s := ss.AppendEmpty()
		s.SetKind(ptrace.SpanKindServer)
		s.SetName("shop.v1.Cart/Put")
		s.SetTraceID(pcommon.TraceID{1, byte(i)})
		s.SetSpanID(pcommon.SpanID{2, byte(i)})
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Millisecond)))
		s.Attributes().PutStr("rpc.system", "grpc")
		s.Attributes().PutInt("rpc.grpc.status_code", 0)
		if fix != nil {
			fix(i, s)
		}
	}
	return td
}

func protobuf(t testing.TB, td ptrace.Traces) []byte {
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

const (
	pb = "application/x-protobuf"
	js = "application/json"
)

func TestHTTPExport(t *testing.T) {
	t.Parallel()
	partial := traces(4, func(i int, s ptrace.Span) {
		switch i {
		case 1:
			s.Attributes().Remove("rpc.grpc.status_code")
		case 2:
			s.SetStartTimestamp(1) // 1970: before what ClickHouse holds
			s.SetEndTimestamp(2)
		case 3:
			s.SetKind(ptrace.SpanKindClient)
		}
	})
	tests := []struct {
		name        string
		ctype, enc  string
		key         string
		body        []byte
		down        bool
		status      int
		code        codes.Code // of the google.rpc.Status body, when not 200
		produced    int
		rejected    int64
		reason      []string
		retryAfter  string
		answerCType string
		checkEvents func(t *testing.T, events []requestlog.Event)
	}{
		{name: "specification JSON: hex ids, client span ignored", ctype: js, key: "good", body: []byte(specJSON), status: 200, produced: 1, answerCType: js,
			checkEvents: func(t *testing.T, es []requestlog.Event) {
				want := requestlog.Event{
					RequestID: "5b8efff798038103d269b633813fc60c-eee19b7ec3c1b174", ServiceName: "shop.v1.Cart", MethodName: "Get",
					Status: "error", GRPCStatusCode: requestlog.CodeName(uint32(codes.NotFound)), DurationMS: 250,
					CreatedAt: time.Unix(1544712660, 0).UTC(), ClientIP: "10.0.0.9",
				}
				if es[0] != want {
					t.Fatalf("event %+v\nwant  %+v", es[0], want)
				}
			}},
		{name: "JSON with charset, gzip", ctype: js + "; charset=utf-8", enc: "gzip", key: "good", body: gz([]byte(specJSON)), status: 200, produced: 1, answerCType: js},
		{name: "protobuf", ctype: pb, key: "good", body: protobuf(t, traces(3, nil)), status: 200, produced: 3, answerCType: pb},
		{name: "protobuf, gzip", ctype: pb, enc: "gzip", key: "good", body: gz(protobuf(t, traces(2, nil))), status: 200, produced: 2, answerCType: pb},
		{name: "partial success names the rejected spans", ctype: pb, key: "good", body: protobuf(t, partial), status: 200, produced: 1,
			rejected: 2, reason: []string{"2 spans rejected", "no gRPC status code", "created_at"}, answerCType: pb},
		{name: "no key", ctype: pb, body: protobuf(t, traces(1, nil)), status: 401, code: codes.Unauthenticated, answerCType: pb},
		{name: "wrong key", ctype: js, key: "bad", body: []byte(specJSON), status: 401, code: codes.Unauthenticated, answerCType: js},
		{name: "key store down: retry", ctype: pb, key: "down", body: protobuf(t, traces(1, nil)), status: 503, code: codes.Unavailable, answerCType: pb},
		{name: "Kafka down: retry after a second", ctype: pb, key: "good", body: protobuf(t, traces(1, nil)), down: true, status: 503, code: codes.Unavailable, retryAfter: "1", answerCType: pb},
		{name: "other content type", ctype: "text/plain", key: "good", body: []byte("x"), status: 415, code: codes.InvalidArgument, answerCType: pb},
		{name: "other encoding", ctype: pb, enc: "br", key: "good", body: []byte("x"), status: 415, code: codes.InvalidArgument, answerCType: pb},
		{name: "not protobuf", ctype: pb, key: "good", body: []byte("\xff\xff\xff"), status: 400, code: codes.InvalidArgument, answerCType: pb},
		{name: "not JSON", ctype: js, key: "good", body: []byte("[1,2"), status: 400, code: codes.InvalidArgument, answerCType: js},
		{name: "not gzip", ctype: pb, enc: "gzip", key: "good", body: []byte("plain"), status: 400, code: codes.InvalidArgument, answerCType: pb},
		{name: "too large as sent", ctype: pb, key: "good", body: make([]byte, otlp.MaxBodyBytes+1), status: 413, code: codes.InvalidArgument, answerCType: pb},
		{name: "too large once inflated", ctype: pb, enc: "gzip", key: "good", body: gz(make([]byte, otlp.MaxBodyBytes+1)), status: 413, code: codes.InvalidArgument, answerCType: pb},
		{name: "too many spans", ctype: pb, key: "good", body: protobuf(t, traces(otlp.MaxSpans+1, nil)), status: 413, code: codes.InvalidArgument, answerCType: pb},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &producer{down: tc.down}
			srv := server(t, p)
			req, err := http.NewRequest(http.MethodPost, srv.URL+otlp.Path, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", tc.ctype)
			if tc.enc != "" {
				req.Header.Set("Content-Encoding", tc.enc)
			}
			if tc.key != "" {
				req.Header.Set("X-API-Key", tc.key)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.status || res.Header.Get("Content-Type") != tc.answerCType || res.Header.Get("Retry-After") != tc.retryAfter {
				t.Fatalf("answer %d %q Retry-After %q, want %d %q %q: %q", res.StatusCode, res.Header.Get("Content-Type"),
					res.Header.Get("Retry-After"), tc.status, tc.answerCType, tc.retryAfter, body)
			}
			if len(p.events) != tc.produced {
				t.Fatalf("produced %d events, want %d", len(p.events), tc.produced)
			}
			if tc.checkEvents != nil {
				tc.checkEvents(t, p.events)
			}
			if tc.status != http.StatusOK {
				st := &spb.Status{}
				if tc.answerCType == js {
					err = protojson.Unmarshal(body, st)
				} else {
					err = proto.Unmarshal(body, st)
				}
				if err != nil || codes.Code(st.GetCode()) != tc.code || st.GetMessage() == "" {
					t.Fatalf("error body %v (%v), want a google.rpc.Status with code %v", st, err, tc.code)
				}
				return
			}
			out := ptraceotlp.NewExportResponse()
			if tc.answerCType == js {
				err = out.UnmarshalJSON(body)
			} else {
				err = out.UnmarshalProto(body)
			}
			if err != nil {
				t.Fatal(err)
			}
			ps := out.PartialSuccess()
			if ps.RejectedSpans() != tc.rejected {
				t.Fatalf("rejected %d (%q), want %d", ps.RejectedSpans(), ps.ErrorMessage(), tc.rejected)
			}
			for _, r := range tc.reason {
				if !strings.Contains(ps.ErrorMessage(), r) {
					t.Errorf("partial success message %q does not say %q", ps.ErrorMessage(), r)
				}
			}
			if tc.rejected == 0 && ps.ErrorMessage() != "" {
				t.Errorf("partial success message %q with nothing rejected", ps.ErrorMessage())
			}
		})
	}
}
