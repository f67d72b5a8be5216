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

// FuzzBoundsProto and FuzzBoundsJSON feed any body to the bounds walk
// that runs before decoding: it never panics, refuses only with a 4xx
// *errcode.Error, and what it lets through decodes within every bound.
//
//	go test ./api/otlp -run '^$' -fuzz FuzzBoundsProto -fuzztime 30s
//	go test ./api/otlp -run '^$' -fuzz FuzzBoundsJSON -fuzztime 30s
func FuzzBoundsProto(f *testing.F) {
	for _, td := range boundsSeeds() {
		b, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x02, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzBounds(t, body, boundsProto, func(r ptraceotlp.ExportRequest) error { return r.UnmarshalProto(body) })
	})
}

func FuzzBoundsJSON(f *testing.F) {
	for _, td := range boundsSeeds() {
		b, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalJSON()
		f.Add(b)
	}
	f.Add([]byte(`{"resource_spans":[{"scope_spans":[{"spans":[{},{"attributes":[{"key":"a","value":{"kvlistValue":{"values":[]}}}]}]}]}]}`))
	f.Add([]byte(`{"x":[[[[{"y":[]}]]]],"resourceSpans":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzBounds(t, body, boundsJSON, func(r ptraceotlp.ExportRequest) error { return r.UnmarshalJSON(body) })
	})
}

func boundsSeeds() []ptrace.Traces {
	full := spansWith(3, func(s ptrace.Span) {
		putAttributes(s.Attributes(), 3)
		e := s.Events().AppendEmpty()
		putAttributes(e.Attributes(), 2)
		l := s.Links().AppendEmpty()
		putAttributes(l.Attributes(), 2)
		s.Attributes().PutEmptySlice("list").AppendEmpty().SetEmptyMap().PutStr("k", "v")
	})
	putAttributes(full.ResourceSpans().At(0).Resource().Attributes(), 2)
	return []ptrace.Traces{full, nested(40, true), nested(60, false)}
}

func fuzzBounds(t *testing.T, body []byte, bounds func([]byte) error, decode func(ptraceotlp.ExportRequest) error) {
	if err := bounds(body); err != nil {
		var e *errcode.Error
		if !errors.As(err, &e) || e.Code.HTTPStatus() < 400 || e.Code.HTTPStatus() >= 500 {
			t.Fatalf("bounds error %v is not a 4xx", err)
		}
		return
	}
	req := ptraceotlp.NewExportRequest()
	if decode(req) != nil {
		return
	}
	td := req.Traces()
	if n := td.SpanCount(); n > MaxSpans {
		t.Fatalf("%d spans let through", n)
	}
	rss := td.ResourceSpans()
	for i := range rss.Len() {
		if n := rss.At(i).Resource().Attributes().Len(); n > MaxElements {
			t.Fatalf("a resource of %d attributes let through", n)
		}
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				s := spans.At(k)
				if s.Attributes().Len() > MaxAttributes || s.Events().Len() > MaxEvents || s.Links().Len() > MaxLinks {
					t.Fatalf("a span of %d attributes, %d events, %d links let through", s.Attributes().Len(), s.Events().Len(), s.Links().Len())
				}
			}
		}
	}
}
