package otlp

import (
	"bytes"
	"compress/gzip"
	"errors"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// FuzzDecode feeds any body, of either type, plain or gzip, to the HTTP
// body decoding and the span mapping behind it: nothing panics, and every
// refusal is an *errcode.Error with a 4xx status (never a 500).
//
//	go test ./api/otlp -run '^$' -fuzz FuzzDecode -fuzztime 30s
func FuzzDecode(f *testing.F) {
	td := ptrace.NewTraces()
	s := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetKind(ptrace.SpanKindServer)
	s.SetName("a.v1.Svc/Get")
	s.SetStartTimestamp(1_700_000_000_000_000_000)
	s.SetEndTimestamp(1_700_000_000_100_000_000)
	s.Attributes().PutStr("rpc.system.name", "grpc")
	s.Attributes().PutStr("rpc.response.status_code", "NOT_FOUND")
	req := ptraceotlp.NewExportRequestFromTraces(td)
	pbBody, _ := req.MarshalProto()
	jsBody, _ := req.MarshalJSON()
	for _, b := range [][]byte{pbBody, jsBody, []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5B8EFFF798038103D269B633813FC60C","kind":2}]}]}]}`), nil, []byte("{")} {
		f.Add(b, false, false)
		f.Add(b, true, false)
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		_, _ = w.Write(b)
		_ = w.Close()
		f.Add(z.Bytes(), false, true)
		f.Add(z.Bytes(), true, true)
	}
	f.Fuzz(func(t *testing.T, body []byte, json, gz bool) {
		typ, enc := typeProtobuf, ""
		if json {
			typ = typeJSON
		}
		if gz {
			enc = "gzip"
		}
		req, err := decode(typ, enc, bytes.NewReader(body))
		if err != nil {
			var e *errcode.Error
			if !errors.As(err, &e) || e.Code.HTTPStatus() < 400 || e.Code.HTTPStatus() >= 500 {
				t.Fatalf("decode error %v is not a 4xx", err)
			}
			return
		}
		rss := req.Traces().ResourceSpans()
		for i := range rss.Len() {
			sss := rss.At(i).ScopeSpans()
			for j := range sss.Len() {
				spans := sss.At(j).Spans()
				for k := range spans.Len() {
					_, _ = FromSpan(spans.At(k))
				}
			}
		}
	})
}
