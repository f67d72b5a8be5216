package monitor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
)

// DecodeEvents reads a batch of events from r as a stream: a JSON array,
// or with ndjson one event per line. It holds one event's bytes at a time
// and stops with errcode TooLarge as soon as the batch passes maxEvents or
// r its byte limit (an http.MaxBytesReader), so a huge body costs its
// events, not its size. An element that is no valid event is refused on
// its own (named in the second result, its entry in the first left zero);
// a body that is no array (or no NDJSON) at all is a BadRequest error.
func DecodeEvents(r io.Reader, ndjson bool, maxEvents int) ([]requestlog.Event, []requestlog.FieldError, error) {
	dec := json.NewDecoder(r)
	var batch []requestlog.Event
	var refused []requestlog.FieldError
	next := func() error {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if len(batch) == maxEvents {
			return errcode.New(errcode.TooLarge, fmt.Sprintf("send at most %d events per request", maxEvents))
		}
		e, bad := decodeEvent(raw)
		if bad != nil {
			refused = append(refused, requestlog.FieldError{Index: len(batch), Field: bad.field, Message: bad.msg})
			e = requestlog.Event{}
		}
		batch = append(batch, e)
		return nil
	}
	notArray := errcode.New(errcode.BadRequest, "request body must be a JSON array of request-log events")
	if ndjson {
		notArray = errcode.New(errcode.BadRequest, "request body must be request-log events as JSON objects, one per line")
		for {
			err := next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, nil, streamError(err, notArray)
			}
		}
	} else {
		if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
			return nil, nil, streamError(err, notArray)
		}
		for dec.More() {
			if err := next(); err != nil {
				return nil, nil, streamError(err, notArray)
			}
		}
		if _, err := dec.Token(); err != nil {
			return nil, nil, streamError(err, notArray)
		}
		// Nothing may follow the array: two parsers must not read one
		// body differently.
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, nil, streamError(err, errcode.New(errcode.BadRequest, "request body has data after the JSON array"))
		}
	}
	if len(batch) == 0 {
		return nil, nil, errcode.New(errcode.BadRequest, fmt.Sprintf("send 1 to %d events per request", maxEvents))
	}
	return batch, refused, nil
}

// streamError is err as the answer: past the byte limit 413, an error of
// ours as it is, anything else (bad JSON) otherwise.
func streamError(err error, otherwise *errcode.Error) error {
	var big *http.MaxBytesError
	var e *errcode.Error
	switch {
	case errors.As(err, &big):
		return errcode.New(errcode.TooLarge, fmt.Sprintf("request body is larger than %d bytes", big.Limit))
	case errors.As(err, &e):
		return e
	}
	return otherwise
}

// wireEvent is an event as clients send it: grpc_status_code may also be
// a number.
type wireEvent struct {
	requestlog.Event
	GRPCStatusCode wireCode `json:"grpc_status_code"`
}

// wireCode is a gRPC status code given as a string or a JSON integer.
type wireCode string

var errCodeType = errors.New("must be a string or an integer gRPC status code")

func (c *wireCode) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return errCodeType
		}
		*c = wireCode(s)
		return nil
	}
	if string(b) == "null" {
		return nil
	}
	n, err := strconv.ParseUint(string(b), 10, 32)
	if err != nil {
		return errCodeType
	}
	*c = wireCode(strconv.FormatUint(n, 10))
	return nil
}

type decodeError struct{ field, msg string }

// decodeEvent reads one element strictly: unknown fields and wrong types
// are problems of that element only.
func decodeEvent(raw json.RawMessage) (requestlog.Event, *decodeError) {
	var w wireEvent
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		var typ *json.UnmarshalTypeError
		var tm *time.ParseError
		switch {
		case errors.Is(err, errCodeType):
			return requestlog.Event{}, &decodeError{"grpc_status_code", errCodeType.Error()}
		case errors.As(err, &typ) && typ.Field != "":
			return requestlog.Event{}, &decodeError{strings.TrimPrefix(typ.Field, "Event."), "must be of type " + typ.Type.String()}
		case errors.As(err, &typ):
			return requestlog.Event{}, &decodeError{"", "must be a JSON object"}
		case errors.As(err, &tm):
			return requestlog.Event{}, &decodeError{"created_at", "must be an RFC 3339 date-time"}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return requestlog.Event{}, &decodeError{strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), "unknown field"}
		default:
			return requestlog.Event{}, &decodeError{"", "is not a valid event"}
		}
	}
	e := w.Event
	e.GRPCStatusCode = string(w.GRPCStatusCode)
	return e, nil
}
