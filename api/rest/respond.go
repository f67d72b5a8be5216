package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// JSON writes v with the given status.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	// Bodies are JSON for API clients, not HTML: keep URLs readable.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// The status line is gone; all that is left is to note it.
		slog.Debug("write response", "err", err)
	}
}

// MaxBodyBytes bounds every JSON body the API accepts.
const MaxBodyBytes = 1 << 20

func badBody(format string, args ...any) *errcode.Error {
	return errcode.New(errcode.BadRequest, fmt.Sprintf(format, args...))
}

// Decode reads one JSON object into dst and returns an *errcode.Error
// (bad_request, or unsupported_media_type for a wrong content type; its
// message is safe to show) for anything but exactly that. It is strict where encoding/json is lenient,
// because a lenient edge lets two parsers (a proxy, a WAF, the client's
// own validator) read one body differently:
//
//   - the Content-Type must be application/json (parameters allowed, a
//     charset only if it is utf-8), else 415;
//   - the body must be valid UTF-8, with no unpaired \uD800-\uDFFF escape
//     (encoding/json would turn either into U+FFFD);
//   - an object may not repeat a key (encoding/json keeps the last one);
//   - a key must match a field's name exactly (encoding/json also takes a
//     case-insensitive match);
//   - no unknown field, no trailing data, at most MaxBodyBytes.
func Decode(w http.ResponseWriter, r *http.Request, dst any) error {
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var big *http.MaxBytesError
		if errors.As(err, &big) {
			return badBody("request body is larger than %d bytes", big.Limit)
		}
		return badBody("request body could not be read")
	}
	if !utf8.Valid(body) {
		return badBody("request body is not valid UTF-8")
	}
	if unpairedSurrogate(body) {
		return badBody("request body is not valid UTF-8: it escapes an unpaired surrogate")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return badBody("request body is empty")
		case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
			return badBody("request body is not valid JSON")
		case errors.As(err, &typ):
			if typ.Field == "" {
				return badBody("request body must be a JSON object")
			}
			return badBody("field %q must be of type %s", typ.Field, typ.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return badBody("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		default:
			return badBody("request body is not valid JSON")
		}
	}
	if dec.More() {
		return badBody("request body must hold a single JSON object")
	}
	// The body is one valid JSON value now; walk it again for what
	// encoding/json lets through.
	if err := checkKeys(json.NewDecoder(bytes.NewReader(body)), reflect.TypeOf(dst), ""); err != nil {
		return err
	}
	return nil
}

// checkContentType accepts application/json with any parameters but a
// charset other than utf-8.
func checkContentType(ct string) *errcode.Error {
	unsupported := errcode.New(errcode.UnsupportedMediaType, "Content-Type must be application/json")
	if ct == "" {
		return unsupported
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return unsupported
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return errcode.New(errcode.UnsupportedMediaType, "the only charset accepted is utf-8")
	}
	return nil
}

// checkKeys reads one value from dec, whose Go destination type is t (nil
// when unknown, as under an interface), and refuses a repeated key in any
// object and a key that names a struct field only case-insensitively. at
// is the path so far, for the message.
func checkKeys(dec *json.Decoder, t reflect.Type, at string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && reflect.PointerTo(t).Implements(unmarshalerType) {
		t = nil // it reads its own JSON; only duplicates are checked below
	}
	tok, err := dec.Token()
	if err != nil {
		return badBody("request body is not valid JSON")
	}
	switch tok {
	case json.Delim('{'):
		var fields map[string]reflect.Type
		var elem reflect.Type
		switch {
		case t == nil:
		case t.Kind() == reflect.Struct:
			fields = jsonFields(t)
		case t.Kind() == reflect.Map:
			elem = t.Elem()
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return badBody("request body is not valid JSON")
			}
			key, _ := kt.(string)
			path := key
			if at != "" {
				path = at + "." + key
			}
			if seen[key] {
				return badBody("duplicate key %q", path)
			}
			seen[key] = true
			next := elem
			if fields != nil {
				ft, ok := fields[key]
				if !ok {
					for name := range fields {
						if strings.EqualFold(name, key) {
							return badBody("unknown field %q (field names are case-sensitive: did you mean %q?)", path, name)
						}
					}
				}
				next = ft
			}
			if err := checkKeys(dec, next, path); err != nil {
				return err
			}
		}
		_, err = dec.Token() // '}'
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := checkKeys(dec, elem, at+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
	}
	if err != nil {
		return badBody("request body is not valid JSON")
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// jsonFields maps the JSON names of t's fields, as encoding/json sees them
// (tag name or Go name, "-" skipped, embedded structs promoted), to their
// types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, shadowed := out[k]; !shadowed {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// unpairedSurrogate tells whether a JSON text escapes a UTF-16 surrogate
// that is not half of a pair. It runs before the JSON is parsed: on text
// that is not JSON its answer may be either, and the parse refuses it then.
func unpairedSurrogate(b []byte) bool {
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			inString = !inString
		case !inString || c != '\\':
		case i+1 < len(b) && b[i+1] != 'u':
			i++ // a two-character escape
		default:
			u, ok := hex4(b, i+2)
			switch {
			case !ok:
				return true // cannot happen in valid JSON; refuse anyway
			case u >= 0xDC00 && u <= 0xDFFF:
				return true
			case u >= 0xD800 && u <= 0xDBFF:
				lo, ok := hex4(b, i+8)
				if i+7 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' || !ok || lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 11
			default:
				i += 5
			}
		}
	}
	return false
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[at:at+4]), 16, 16)
	return rune(v), err == nil
}

// DecodeOr400 is Decode that answers a refused body itself (400, or 415
// for a wrong content type); it reports whether the handler may go on.
func DecodeOr400(w http.ResponseWriter, r *http.Request, dst any) bool {
	if err := Decode(w, r, dst); err != nil {
		Fail(w, r, err)
		return false
	}
	return true
}
