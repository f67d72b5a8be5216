package otlp

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
)

// Bounds on one export, checked on the body before it is decoded (bounds
// counts them from the protobuf wire format or the JSON tokens), so that
// what decoding allocates is proportional to these numbers, not to the
// body: an empty span is 2 bytes on the wire and some 150 in memory.
// Past a count the export is refused whole (TooLarge: HTTP 413, gRPC
// INVALID_ARGUMENT), past the depth it is malformed (400). docs/otlp.md
// and docs/api.md list them.
const (
	// MaxSpans is the most spans one export may carry: the JSON ingest's
	// limit on events per call.
	MaxSpans = requestlog.MaxBatchEvents
	// MaxAttributes bounds the attributes of one span, event, link,
	// resource or scope; MaxEvents and MaxLinks the events and links of
	// one span. 128 is each one's default limit in the OpenTelemetry
	// SDKs, so an SDK's export never reaches them.
	MaxAttributes = 128
	MaxEvents     = 128
	MaxLinks      = 128
	// MaxElements bounds everything of an export that decodes to an
	// object of its own: resource and scope spans, spans, events, links,
	// attributes, the values of array and key-value list attributes,
	// entity references and their keys. A full export of 10,000 spans
	// with 20 attributes each is 210,000.
	MaxElements = 250_000
	// MaxDepth bounds the nesting of an attribute's value (each key-value,
	// value, array and key-value list one level): the protobuf decoder's
	// own limit, which the JSON decoder lacks.
	MaxDepth = 100
)

// tally counts what an export holds as bounds walks it, and says which
// bound is passed first.
type tally struct {
	spans, elements int
}

func tooMany(what string, most int) error {
	return errcode.New(errcode.TooLarge, fmt.Sprintf("an export may hold at most %d %s", most, what))
}

var errTooDeep = errcode.New(errcode.BadRequest, fmt.Sprintf("an attribute value is nested deeper than %d levels", MaxDepth))

func (t *tally) element() error {
	t.elements++
	if t.elements > MaxElements {
		return tooMany("elements (spans, events, links, attributes and their values)", MaxElements)
	}
	return nil
}

func (t *tally) span() error {
	t.spans++
	if t.spans > MaxSpans {
		return tooMany("spans", MaxSpans)
	}
	return t.element()
}

// perOwner counts the attributes, events or links of one owner.
type perOwner struct {
	n    int
	most int
	what string
}

func (p *perOwner) add() error {
	p.n++
	if p.n > p.most {
		return errcode.New(errcode.TooLarge, fmt.Sprintf("at most %d %s", p.most, p.what))
	}
	return nil
}

func attributesOf(owner string) perOwner {
	return perOwner{most: MaxAttributes, what: "attributes per " + owner}
}

// The protobuf field numbers bounds reads (opentelemetry-proto's
// trace/v1, resource/v1, common/v1 and collector/trace/v1).
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   = 1
	fResourceSpansScopeSpans = 2
	// deprecated_scope_spans: the old instrumentation_library_spans,
	// which the decoder moves into scope_spans.
	fResourceSpansDeprecated = 1000

	fResourceAttributes = 1
	fResourceEntityRefs = 3
	fEntityRefIDKeys    = 3
	fEntityRefDescKeys  = 4

	fScopeSpansScope = 1
	fScopeSpansSpans = 2
	fScopeAttributes = 3

	fSpanAttributes  = 9
	fSpanEvents      = 11
	fSpanLinks       = 13
	fEventAttributes = 3
	fLinkAttributes  = 4

	fKeyValueValue  = 2
	fAnyValueArray  = 5
	fAnyValueKVList = 6
	fArrayValues    = 1 // ArrayValue.values and KeyValueList.values
)

// errMalformed is a body that is not protobuf at all; the decoder would
// refuse it too.
var errMalformed = errcode.New(errcode.BadRequest, "the body is not an OTLP ExportTraceServiceRequest ("+typeProtobuf+")")

// fields calls fn with each length-delimited field of the message b (the
// only kind that nests or repeats into objects); other fields are
// skipped, as the decoder skips what it does not know.
func fields(b []byte, fn func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errMalformed
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}

// boundsProto checks a protobuf ExportTraceServiceRequest against the
// bounds without decoding it: it walks the wire format, allocating
// nothing, and stops at the first bound passed.
func boundsProto(b []byte) error {
	var t tally
	return fields(b, func(num protowire.Number, v []byte) error {
		if num != fRequestResourceSpans {
			return nil
		}
		if err := t.element(); err != nil {
			return err
		}
		return t.resourceSpans(v)
	})
}

func (t *tally) resourceSpans(b []byte) error {
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fResourceSpansResource:
			return t.resource(v)
		case fResourceSpansScopeSpans, fResourceSpansDeprecated:
			if err := t.element(); err != nil {
				return err
			}
			return t.scopeSpans(v)
		}
		return nil
	})
}

func (t *tally) resource(b []byte) error {
	attrs := attributesOf("resource")
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fResourceAttributes:
			return t.attribute(&attrs, v)
		case fResourceEntityRefs:
			if err := t.element(); err != nil {
				return err
			}
			return fields(v, func(num protowire.Number, _ []byte) error {
				if num == fEntityRefIDKeys || num == fEntityRefDescKeys {
					return t.element()
				}
				return nil
			})
		}
		return nil
	})
}

func (t *tally) scopeSpans(b []byte) error {
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fScopeSpansScope:
			attrs := attributesOf("scope")
			return fields(v, func(num protowire.Number, v []byte) error {
				if num == fScopeAttributes {
					return t.attribute(&attrs, v)
				}
				return nil
			})
		case fScopeSpansSpans:
			if err := t.span(); err != nil {
				return err
			}
			return t.spanFields(v)
		}
		return nil
	})
}

func (t *tally) spanFields(b []byte) error {
	attrs := attributesOf("span")
	events := perOwner{most: MaxEvents, what: "events per span"}
	links := perOwner{most: MaxLinks, what: "links per span"}
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fSpanAttributes:
			return t.attribute(&attrs, v)
		case fSpanEvents:
			return t.owner(&events, v, fEventAttributes, "event")
		case fSpanLinks:
			return t.owner(&links, v, fLinkAttributes, "link")
		}
		return nil
	})
}

// owner counts one event or link of a span, and its attributes (field
// attrField).
func (t *tally) owner(count *perOwner, b []byte, attrField protowire.Number, what string) error {
	if err := count.add(); err != nil {
		return err
	}
	if err := t.element(); err != nil {
		return err
	}
	attrs := attributesOf(what)
	return fields(b, func(num protowire.Number, v []byte) error {
		if num == attrField {
			return t.attribute(&attrs, v)
		}
		return nil
	})
}

// attribute counts one attribute of an owner and walks its value.
func (t *tally) attribute(attrs *perOwner, b []byte) error {
	if err := attrs.add(); err != nil {
		return err
	}
	if err := t.element(); err != nil {
		return err
	}
	return t.keyValue(b, 0)
}

// keyValue, anyValue and list walk an attribute's value as the decoder
// does, one depth level for each message, with its limit: a message at
// depth MaxDepth is refused.
func (t *tally) keyValue(b []byte, depth int) error {
	if depth >= MaxDepth {
		return errTooDeep
	}
	return fields(b, func(num protowire.Number, v []byte) error {
		if num == fKeyValueValue {
			return t.anyValue(v, depth+1)
		}
		return nil
	})
}

func (t *tally) anyValue(b []byte, depth int) error {
	if depth >= MaxDepth {
		return errTooDeep
	}
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fAnyValueArray:
			return t.list(v, depth+1, false)
		case fAnyValueKVList:
			return t.list(v, depth+1, true)
		}
		return nil
	})
}

// list walks an ArrayValue (values are AnyValues) or a KeyValueList
// (values are KeyValues).
func (t *tally) list(b []byte, depth int, kv bool) error {
	if depth >= MaxDepth {
		return errTooDeep
	}
	return fields(b, func(num protowire.Number, v []byte) error {
		if num != fArrayValues {
			return nil
		}
		if err := t.element(); err != nil {
			return err
		}
		if kv {
			return t.keyValue(v, depth+1)
		}
		return t.anyValue(v, depth+1)
	})
}
