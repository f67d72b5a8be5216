package otlp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

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
	dec  *json.Decoder
	t    tally
	nest int // objects and arrays open
}

// boundsJSON checks a JSON ExportTraceServiceRequest against the bounds
// without decoding it, stopping at the first bound passed.
func boundsJSON(b []byte) error {
	w := &jsonWalk{dec: json.NewDecoder(bytes.NewReader(b))}
	w.dec.UseNumber()
	return w.object(func(key string) error {
		switch key {
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
}

func (w *jsonWalk) resourceSpans(key string) error {
	switch key {
	case "resource":
		attrs := attributesOf("resource")
		return w.object(func(key string) error {
			switch key {
			case "attributes":
				return w.attributes(&attrs)
			case "entityRefs", "entity_refs":
				return w.array(func() error {
					if err := w.t.element(); err != nil {
						return err
					}
					return w.object(func(key string) error {
						switch key {
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

func (w *jsonWalk) scopeSpans(key string) error {
	switch key {
	case "scope":
		attrs := attributesOf("scope")
		return w.object(func(key string) error {
			if key == "attributes" {
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
			return w.object(func(key string) error {
				switch key {
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
	return w.object(func(key string) error {
		if key == "attributes" {
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
	return w.object(func(key string) error {
		if key == "value" {
			return w.anyValue(depth + 1)
		}
		return w.skip()
	})
}

func (w *jsonWalk) anyValue(depth int) error {
	if depth >= MaxDepth {
		return errTooDeep
	}
	return w.object(func(key string) error {
		switch key {
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
	return w.object(func(key string) error {
		if key != "values" {
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
func (w *jsonWalk) object(fn func(key string) error) error {
	open, err := w.open('{')
	if err != nil || !open {
		return err
	}
	for w.dec.More() {
		tok, err := w.token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errJSONMalformed
		}
		if err := fn(key); err != nil {
			return err
		}
	}
	return w.close()
}

// array reads one value: an array, whose every element fn reads, or
// anything else, skipped.
func (w *jsonWalk) array(fn func() error) error {
	open, err := w.open('[')
	if err != nil || !open {
		return err
	}
	for w.dec.More() {
		if err := fn(); err != nil {
			return err
		}
	}
	return w.close()
}

// open reads the next token: the delimiter want opens (true), or another
// value, which it skips (false).
func (w *jsonWalk) open(want json.Delim) (bool, error) {
	tok, err := w.token()
	if err != nil {
		return false, err
	}
	d, ok := tok.(json.Delim)
	switch {
	case ok && d == want:
		return true, nil
	case ok:
		return false, w.skipRest()
	}
	return false, nil
}

func (w *jsonWalk) close() error {
	_, err := w.token() // the closing delimiter: Token checks it matches
	return err
}

// skip reads one value of any kind, however nested, without keeping it.
func (w *jsonWalk) skip() error {
	tok, err := w.token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
		return w.skipRest()
	}
	return nil
}

// skipRest reads up to the end of the object or array just opened.
func (w *jsonWalk) skipRest() error {
	for end := w.nest - 1; w.nest > end; {
		if _, err := w.token(); err != nil {
			return err
		}
	}
	return nil
}

// token is the decoder's next token, with the nesting counted and bounded.
func (w *jsonWalk) token() (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errJSONMalformed
		}
		return nil, errcode.Wrap(errcode.BadRequest, errJSONMalformed.Message, err)
	}
	if d, ok := tok.(json.Delim); ok {
		switch d {
		case '{', '[':
			w.nest++
			if w.nest > maxJSONNesting {
				return nil, errJSONTooDeep
			}
		default:
			w.nest--
		}
	}
	return tok, nil
}
