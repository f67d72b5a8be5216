package otlp

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// maxJSONNesting bounds the nesting of objects and arrays anywhere in a
// JSON body: deeper than any value MaxDepth lets through needs (at most
// two JSON levels for each of its levels) with the ten levels from the
// body's top to an event's attributes above it. It also bounds what
// bounds skips (unknown fields), which MaxDepth does not reach.
const maxJSONNesting = 2*MaxDepth + 16

var (
	errJSONMalformed = errcode.New(errcode.BadRequest, "the body is not an OTLP ExportTraceServiceRequest ("+typeJSON+")")
	errJSONTooDeep   = errcode.New(errcode.BadRequest, fmt.Sprintf("the body nests objects and arrays deeper than %d levels", maxJSONNesting))
)

// jsonWalk walks an OTLP JSON body token by token (the field names the
// decoder reads, camelCase and snake_case), counting in t what decoding
// would allocate and nesting as it goes; nothing is kept but the counts.
type jsonWalk struct {
	lex  lexer
	t    tally
	nest int // objects and arrays open
}

// boundsJSON checks a JSON ExportTraceServiceRequest against the bounds
// without decoding it, stopping at the first bound passed. The walk then
// holds for the body the decoder reads only if the body is JSON (the
// lexer checks no grammar), which json.Valid then checks: its stack is
// as deep as the nesting the walk bounded.
func boundsJSON(b []byte) error {
	w := &jsonWalk{lex: lexer{b: b}}
	err := w.object(func(key []byte) error {
		switch string(key) {
		case "resourceSpans", "resource_spans":
			return w.array(func() error {
				if err := w.t.element(); err != nil {
					return err
				}
				return w.object(w.resourceSpans)
			})
		}
		return w.skip()
	})
	if err != nil {
		return err
	}
	if !json.Valid(b) {
		return errJSONMalformed
	}
	return nil
}

func (w *jsonWalk) resourceSpans(key []byte) error {
	switch string(key) {
	case "resource":
		attrs := attributesOf("resource")
		return w.object(func(key []byte) error {
			switch string(key) {
			case "attributes":
				return w.attributes(&attrs)
			case "entityRefs", "entity_refs":
				return w.array(func() error {
					if err := w.t.element(); err != nil {
						return err
					}
					return w.object(func(key []byte) error {
						switch string(key) {
						case "idKeys", "id_keys", "descriptionKeys", "description_keys":
							return w.array(func() error {
								if err := w.t.element(); err != nil {
									return err
								}
								return w.skip()
							})
						}
						return w.skip()
					})
				})
			}
			return w.skip()
		})
	case "scopeSpans", "scope_spans", "deprecatedScopeSpans", "deprecated_scope_spans":
		return w.array(func() error {
			if err := w.t.element(); err != nil {
				return err
			}
			return w.object(w.scopeSpans)
		})
	}
	return w.skip()
}

func (w *jsonWalk) scopeSpans(key []byte) error {
	switch string(key) {
	case "scope":
		attrs := attributesOf("scope")
		return w.object(func(key []byte) error {
			if string(key) == "attributes" {
				return w.attributes(&attrs)
			}
			return w.skip()
		})
	case "spans":
		return w.array(func() error {
			if err := w.t.span(); err != nil {
				return err
			}
			attrs := attributesOf("span")
			events := perOwner{most: MaxEvents, what: "events per span"}
			links := perOwner{most: MaxLinks, what: "links per span"}
			return w.object(func(key []byte) error {
				switch string(key) {
				case "attributes":
					return w.attributes(&attrs)
				case "events":
					return w.array(func() error { return w.owner(&events, "event") })
				case "links":
					return w.array(func() error { return w.owner(&links, "link") })
				}
				return w.skip()
			})
		})
	}
	return w.skip()
}

// owner counts one event or link and its attributes.
func (w *jsonWalk) owner(count *perOwner, what string) error {
	if err := count.add(); err != nil {
		return err
	}
	if err := w.t.element(); err != nil {
		return err
	}
	attrs := attributesOf(what)
	return w.object(func(key []byte) error {
		if string(key) == "attributes" {
			return w.attributes(&attrs)
		}
		return w.skip()
	})
}

func (w *jsonWalk) attributes(attrs *perOwner) error {
	return w.array(func() error {
		if err := attrs.add(); err != nil {
			return err
		}
		if err := w.t.element(); err != nil {
			return err
		}
		return w.keyValue(0)
	})
}

// keyValue, anyValue and list count depth as the protobuf walk does (one
// level for each key-value, value, array and key-value list).
func (w *jsonWalk) keyValue(depth int) error {
	if depth >= MaxDepth {
		return errTooDeep
	}
	return w.object(func(key []byte) error {
		if string(key) == "value" {
			return w.anyValue(depth + 1)
		}
		return w.skip()
	})
}

func (w *jsonWalk) anyValue(depth int) error {
	if depth >= MaxDepth {
		return errTooDeep
	}
	return w.object(func(key []byte) error {
		switch string(key) {
		case "arrayValue", "array_value":
			return w.list(depth+1, false)
		case "kvlistValue", "kvlist_value":
			return w.list(depth+1, true)
		}
		return w.skip()
	})
}

func (w *jsonWalk) list(depth int, kv bool) error {
	if depth >= MaxDepth {
		return errTooDeep
	}
	return w.object(func(key []byte) error {
		if string(key) != "values" {
			return w.skip()
		}
		return w.array(func() error {
			if err := w.t.element(); err != nil {
				return err
			}
			if kv {
				return w.keyValue(depth + 1)
			}
			return w.anyValue(depth + 1)
		})
	})
}

// object reads one value: an object, whose every field fn reads (one
// value each), or anything else, skipped (null, or a value of the wrong
// type, which the decoder refuses or ignores on its own).
func (w *jsonWalk) object(fn func(key []byte) error) error {
	if open, err := w.open('{'); err != nil || !open {
		return err
	}
	if w.lex.peek() == '}' {
		return w.close()
	}
	for {
		kind, key, err := w.token()
		if err != nil {
			return err
		}
		if kind != '"' {
			return errJSONMalformed
		}
		if kind, _, err = w.token(); err != nil || kind != ':' {
			return cmpOr(err, errJSONMalformed)
		}
		if bytes.IndexByte(key, '\\') >= 0 {
			// The decoder compares names unescaped.
			var name string
			if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &name) != nil {
				return errJSONMalformed
			}
			key = []byte(name)
		}
		if err := fn(key); err != nil {
			return err
		}
		if done, err := w.next('}'); err != nil || done {
			return err
		}
	}
}

// array reads one value: an array, whose every element fn reads, or
// anything else, skipped.
func (w *jsonWalk) array(fn func() error) error {
	if open, err := w.open('['); err != nil || !open {
		return err
	}
	if w.lex.peek() == ']' {
		return w.close()
	}
	for {
		if err := fn(); err != nil {
			return err
		}
		if done, err := w.next(']'); err != nil || done {
			return err
		}
	}
}

// next reads what follows a member: a comma (false), or end (true).
func (w *jsonWalk) next(end byte) (bool, error) {
	kind, _, err := w.token()
	switch {
	case err != nil:
		return false, err
	case kind == end:
		return true, nil
	case kind == ',':
		return false, nil
	}
	return false, errJSONMalformed
}

// open reads the next value's first token: the delimiter want (true), or
// another value, which it skips (false).
func (w *jsonWalk) open(want byte) (bool, error) {
	kind, _, err := w.token()
	switch {
	case err != nil:
		return false, err
	case kind == want:
		return true, nil
	case kind == '{' || kind == '[':
		return false, w.skipRest()
	case kind == '"' || kind == 'v':
		return false, nil
	}
	return false, errJSONMalformed
}

func (w *jsonWalk) close() error {
	_, _, err := w.token()
	return err
}

// skip reads one value of any kind, however nested, without keeping it.
func (w *jsonWalk) skip() error {
	_, err := w.open(0)
	return err
}

// skipRest reads up to the end of the object or array just opened.
func (w *jsonWalk) skipRest() error {
	for end := w.nest - 1; w.nest > end; {
		if _, _, err := w.token(); err != nil {
			return err
		}
	}
	return nil
}

// token is the lexer's next token, with the nesting counted and bounded.
func (w *jsonWalk) token() (byte, []byte, error) {
	kind, s := w.lex.next()
	switch kind {
	case 0:
		return 0, nil, errJSONMalformed
	case '{', '[':
		w.nest++
		if w.nest > maxJSONNesting {
			return 0, nil, errJSONTooDeep
		}
	case '}', ']':
		w.nest--
	}
	return kind, s, nil
}

func cmpOr(err, or error) error {
	if err != nil {
		return err
	}
	return or
}

// lexer splits JSON into tokens without allocating: a delimiter ('{',
// '}', '[', ']', ':', ','), a string ('"', its raw bytes between the
// quotes), any other scalar ('v'), or the end (0). It checks no grammar:
// boundsJSON has json.Valid do that, so what it counted is what the
// decoder reads.
type lexer struct {
	b []byte
	i int
}

func (l *lexer) peek() byte {
	save := l.i
	kind, _ := l.next()
	l.i = save
	return kind
}

func (l *lexer) next() (byte, []byte) {
	for l.i < len(l.b) && isSpace(l.b[l.i]) {
		l.i++
	}
	if l.i == len(l.b) {
		return 0, nil
	}
	switch c := l.b[l.i]; c {
	case '{', '}', '[', ']', ':', ',':
		l.i++
		return c, nil
	case '"':
		start := l.i + 1
		for j := start; j < len(l.b); j++ {
			switch l.b[j] {
			case '\\':
				j++
			case '"':
				l.i = j + 1
				return '"', l.b[start:j]
			}
		}
		l.i = len(l.b)
		return 0, nil // not terminated
	}
	j := l.i + 1
	for j < len(l.b) && !isSpace(l.b[j]) && !isDelim(l.b[j]) {
		j++
	}
	l.i = j
	return 'v', nil
}

func isDelim(c byte) bool {
	switch c {
	case '{', '}', '[', ']', ':', ',', '"':
		return true
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
