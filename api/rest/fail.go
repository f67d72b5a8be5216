package rest

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// ErrorBody is the shape of every error response (docs/api.md#errors).
type ErrorBody struct {
	Success bool              `json:"success"`
	Error   string            `json:"error"`
	Code    string            `json:"code"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// WriteError answers e: the status its code has in errcode's table, the
// error body, and Retry-After (whole seconds, at least 1) when e says when
// to retry. It logs nothing; Fail is for errors that may be cfgd's own.
func WriteError(w http.ResponseWriter, e *errcode.Error) {
	SetRetryAfter(w, e)
	JSON(w, e.Code.HTTPStatus(), ErrorBody{Error: e.Message, Code: string(e.Code), Fields: e.Fields})
}

// SetRetryAfter sets Retry-After (whole seconds, at least 1) when e says
// when to retry.
func SetRetryAfter(w http.ResponseWriter, e *errcode.Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(e.RetryAfter)))
	}
}

func retrySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// Fail answers any error through errcode.From: an *errcode.Error as it
// says, a dependency that is down as 503, anything else as a bare 500. A
// failure on cfgd's side is logged with the request; the client never
// sees its text. When the client has gone, nobody reads the answer: it is
// only logged as 499.
func Fail(w http.ResponseWriter, r *http.Request, err error) {
	WriteError(w, Classify(r, err))
}

// Classify is what Fail answers for err, logged as Fail logs it: for an
// endpoint whose error body has another shape (OTLP's google.rpc.Status).
func Classify(r *http.Request, err error) *errcode.Error {
	e := errcode.From(err)
	if r.Context().Err() != nil {
		e = errcode.Wrap(errcode.ClientClosed, errcode.MessageClientClosed, err)
	}
	switch {
	case e.Code == errcode.Internal:
		slog.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", e.Err)
	case e.Logged():
		slog.WarnContext(r.Context(), "request failed on a dependency", "method", r.Method, "path", r.URL.Path, "code", string(e.Code), "err", err)
	}
	return e
}
