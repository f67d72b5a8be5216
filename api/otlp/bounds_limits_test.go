package otlp

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// spansWith is an export of n spans over two resources, each span
// changed by fix.
func spansWith(n int, fix func(s ptrace.Span)) ptrace.Traces {
	td := ptrace.NewTraces()
	for r := range 2 {
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
		for i := r; i < n; i += 2 {
			s := ss.AppendEmpty()
			if fix != nil {
				fix(s)
			}
		}
	}
	return td
}

func putAttributes(m pcommon.Map, n int) {
	for i := range n {
		m.PutStr(fmt.Sprint("k", i), "")
	}
}

// codeOf is the errcode of err, "" for nil.
func codeOf(err error) errcode.Code {
	var e *errcode.Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return "not an errcode"
	}
	return ""
}

// Each bound takes what reaches it and refuses one more, in protobuf and
// in JSON alike.
func TestBoundsAtTheirLimits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		td   ptrace.Traces
		want errcode.Code
	}{
		{"10,000 spans", spansWith(MaxSpans, nil), ""},
		{"10,001 spans", spansWith(MaxSpans+1, nil), errcode.TooLarge},
		{"128 attributes", spansWith(1, func(s ptrace.Span) { putAttributes(s.Attributes(), MaxAttributes) }), ""},
		{"129 attributes", spansWith(1, func(s ptrace.Span) { putAttributes(s.Attributes(), MaxAttributes+1) }), errcode.TooLarge},
		{"128 events", spansWith(1, func(s ptrace.Span) {
			for range MaxEvents {
				s.Events().AppendEmpty()
			}
		}), ""},
		{"129 events", spansWith(1, func(s ptrace.Span) {
			for range MaxEvents + 1 {
				s.Events().AppendEmpty()
			}
		}), errcode.TooLarge},
		{"129 links", spansWith(1, func(s ptrace.Span) {
			for range MaxLinks + 1 {
				s.Links().AppendEmpty()
			}
		}), errcode.TooLarge},
		{"an event of 129 attributes", spansWith(1, func(s ptrace.Span) { putAttributes(s.Events().AppendEmpty().Attributes(), MaxAttributes+1) }), errcode.TooLarge},
		{"a link of 129 attributes", spansWith(1, func(s ptrace.Span) { putAttributes(s.Links().AppendEmpty().Attributes(), MaxAttributes+1) }), errcode.TooLarge},
		{"a resource of 129 attributes", func() ptrace.Traces {
			td := spansWith(1, nil)
			putAttributes(td.ResourceSpans().At(0).Resource().Attributes(), MaxAttributes+1)
			return td
		}(), errcode.TooLarge},
		{"a scope of 129 attributes", func() ptrace.Traces {
			td := spansWith(1, nil)
			putAttributes(td.ResourceSpans().At(0).ScopeSpans().At(0).Scope().Attributes(), MaxAttributes+1)
			return td
		}(), errcode.TooLarge},
		// 1,950 spans of 125 attributes and their 4 resource and scope
		// spans are 245,704 elements; 2,000 are 252,004.
		{"245,704 elements", spansWith(1_950, func(s ptrace.Span) { putAttributes(s.Attributes(), 125) }), ""},
		{"252,004 elements", spansWith(2_000, func(s ptrace.Span) { putAttributes(s.Attributes(), 125) }), errcode.TooLarge},
		{"a list of 300,000 values", spansWith(1, func(s ptrace.Span) {
			l := s.Attributes().PutEmptySlice("a")
			for range 300_000 {
				l.AppendEmpty()
			}
		}), errcode.TooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := ptraceotlp.NewExportRequestFromTraces(tc.td)
			pb, err := req.MarshalProto()
			if err != nil {
				t.Fatal(err)
			}
			js, err := req.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if got := codeOf(boundsProto(pb)); got != tc.want {
				t.Errorf("protobuf: %q, want %q", got, tc.want)
			}
			if got := codeOf(boundsJSON(js)); got != tc.want {
				t.Errorf("JSON: %q, want %q", got, tc.want)
			}
		})
	}
}

// The JSON walk reads field names as the decoder does, escapes and all,
// and refuses what is not JSON, whose structure the decoder might read
// otherwise than the walk.
func TestBoundsJSONReadsWhatTheDecoderReads(t *testing.T) {
	t.Parallel()
	spans := func(field string, n int) []byte {
		return []byte(`{"resource_spans":[{"scopeSpans":[{"` + field + `":[{}` + strings.Repeat(`,{}`, n-1) + `]}]}]}`)
	}
	escaped := spans(`sp\u0061ns`, MaxSpans+1)
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalJSON(escaped); err != nil || req.Traces().SpanCount() != MaxSpans+1 {
		t.Fatalf("the decoder reads %d spans (%v) under an escaped name", req.Traces().SpanCount(), err)
	}
	cases := []struct {
		name string
		body []byte
		want errcode.Code
	}{
		{"10,001 spans under an escaped name", escaped, errcode.TooLarge},
		{"10,000 spans", spans("spans", MaxSpans), ""},
		{"spans under an unknown name", spans("spanz", MaxSpans+1), ""},
		{"no comma", []byte(`{"resourceSpans":[{} {}]}`), errcode.BadRequest},
		{"cut short", spans("spans", 3)[:40], errcode.BadRequest},
		{"trailing data", append(spans("spans", 3), []byte(` [[[`)...), errcode.BadRequest},
		{"a string hiding brackets", []byte(`{"x":"[[[{{{\"]]]","resourceSpans":null}`), ""},
		{"not an object", []byte(`null`), ""},
		{"unknown fields nested 300 deep", []byte(`{"x":` + strings.Repeat(`[`, 300) + strings.Repeat(`]`, 300) + `}`), errcode.BadRequest},
	}
	for _, tc := range cases {
		if got := codeOf(boundsJSON(tc.body)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// nested is an export of one span whose attribute nests n key-value lists
// (three levels each: list, key-value, value) or n arrays (two each).
func nested(n int, lists bool) ptrace.Traces {
	return spansWith(1, func(s ptrace.Span) {
		v := s.Attributes().PutEmpty("a")
		for range n {
			if lists {
				v = v.SetEmptyMap().PutEmpty("k")
			} else {
				v = v.SetEmptySlice().AppendEmpty()
			}
		}
	})
}

// The depth bound is the protobuf decoder's own, level for level: a value
// the decoder takes passes the bound, one it refuses does not; JSON, which
// its decoder takes at any depth, is held to the same bound.
func TestDepthBoundIsTheDecoders(t *testing.T) {
	t.Parallel()
	for _, lists := range []bool{true, false} {
		seen := map[bool]bool{}
		for n := 20; n < 60; n++ {
			req := ptraceotlp.NewExportRequestFromTraces(nested(n, lists))
			pb, err := req.MarshalProto()
			if err != nil {
				t.Fatal(err)
			}
			js, err := req.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			decodes := ptraceotlp.NewExportRequest().UnmarshalProto(pb) == nil
			seen[decodes] = true
			bounded := boundsProto(pb)
			if decodes != (bounded == nil) {
				t.Fatalf("lists %v, %d levels: the decoder takes it %v, the bound says %v", lists, n, decodes, bounded)
			}
			if got, want := codeOf(boundsJSON(js)), codeOf(bounded); got != want {
				t.Fatalf("lists %v, %d levels: JSON %q, protobuf %q", lists, n, got, want)
			}
		}
		if !seen[true] || !seen[false] {
			t.Fatalf("lists %v: 20 to 59 levels never crossed the decoder's limit", lists)
		}
	}
}

// BenchmarkBounds is what the bounds walk adds to decoding a full export
// (10,000 spans of 10 attributes and an event):
//
//	go test ./api/otlp -run '^$' -bench Bounds -benchmem
func BenchmarkBounds(b *testing.B) {
	req := ptraceotlp.NewExportRequestFromTraces(spansWith(MaxSpans, func(s ptrace.Span) {
		s.SetName("shop.v1.Cart/Get")
		putAttributes(s.Attributes(), 10)
		s.Events().AppendEmpty().SetName("message")
	}))
	pb, _ := req.MarshalProto()
	js, _ := req.MarshalJSON()
	for _, tc := range []struct {
		name   string
		body   []byte
		bounds func([]byte) error
		decode func([]byte) error
	}{
		{"protobuf", pb, boundsProto, func(b []byte) error { return ptraceotlp.NewExportRequest().UnmarshalProto(b) }},
		{"json", js, boundsJSON, func(b []byte) error { return ptraceotlp.NewExportRequest().UnmarshalJSON(b) }},
	} {
		b.Run(tc.name+"/bounds", func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				if err := tc.bounds(tc.body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/decode", func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				if err := tc.decode(tc.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
