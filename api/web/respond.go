// Package web holds the HTTP plumbing every API package shares: the JSON
// response and error shape of DESIGN.md section 5, body decoding that turns
// every malformed input into a 400, and the middleware of the router.
package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrorBody is the shape of every error response.
type ErrorBody struct {
	Success bool              `json:"success"`
	Error   string            `json:"error"`
	Code    string            `json:"code"`
	Fields  map[string]string `json:"fields,omitempty"`
}

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

// Error writes the standard error body.
func Error(w http.ResponseWriter, status int, code, msg string) {
	JSON(w, status, ErrorBody{Error: msg, Code: code})
}

// FieldErrors writes a 400 with one message per offending field.
func FieldErrors(w http.ResponseWriter, fields map[string]string) {
	JSON(w, http.StatusBadRequest, ErrorBody{Error: "invalid input", Code: "invalid", Fields: fields})
}

// TooManyRequests writes a 429 with Retry-After rounded up to whole seconds.
func TooManyRequests(w http.ResponseWriter, retryAfter time.Duration, msg string) {
	secs := int((retryAfter + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	Error(w, http.StatusTooManyRequests, "rate_limited", msg)
}

// Internal logs err with the request's context and answers a bare 500; the
// client never sees the error text.
func Internal(w http.ResponseWriter, r *http.Request, err error) {
	slog.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	Error(w, http.StatusInternalServerError, "internal", "internal error")
}

// Unavailable answers 503 naming the dependency that is down.
func Unavailable(w http.ResponseWriter, r *http.Request, dependency string, err error) {
	slog.WarnContext(r.Context(), "dependency unavailable", "dependency", dependency, "err", err)
	Error(w, http.StatusServiceUnavailable, "unavailable", dependency+" is unavailable, try again shortly")
}

// MaxBodyBytes bounds every JSON body the API accepts.
const MaxBodyBytes = 1 << 20

// Decode reads a JSON object into dst. It rejects unknown fields, trailing
// data, a wrong content type and oversized bodies. The error it returns is
// safe to show to the client.
func Decode(w http.ResponseWriter, r *http.Request, dst any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return errors.New("Content-Type must be application/json")
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		var big *http.MaxBytesError
		switch {
		case errors.Is(err, io.EOF):
			return errors.New("request body is empty")
		case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
			return errors.New("request body is not valid JSON")
		case errors.As(err, &typ):
			if typ.Field == "" {
				return errors.New("request body must be a JSON object")
			}
			return fmt.Errorf("field %q must be of type %s", typ.Field, typ.Type)
		case errors.As(err, &big):
			return fmt.Errorf("request body is larger than %d bytes", big.Limit)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return fmt.Errorf("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		default:
			return errors.New("request body is not valid JSON")
		}
	}
	if dec.More() {
		return errors.New("request body must hold a single JSON object")
	}
	return nil
}

// DecodeOr400 is Decode that answers the 400 itself; it reports whether the
// handler may go on.
func DecodeOr400(w http.ResponseWriter, r *http.Request, dst any) bool {
	if err := Decode(w, r, dst); err != nil {
		Error(w, http.StatusBadRequest, "bad_request", err.Error())
		return false
	}
	return true
}
