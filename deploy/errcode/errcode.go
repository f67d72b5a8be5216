// Package errcode is the one error type for an outcome a caller should
// see: a code from a closed list, a message safe to show, the offending
// fields, and a retry hint. Application code (commands, read models,
// settings, handlers) returns *Error; each transport turns it into its
// answer through the single table below (HTTP status in api/rest, gRPC
// code in api/grpcserver), so a code means the same on both.
//
// Any other error is classified by From: a cancelled context is the
// client leaving, a deadline or a network error a dependency being down,
// the rest an internal error whose text the caller never sees.
package errcode

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// Code says what went wrong, in the words clients match on: it is the
// "code" of the JSON error body and the reason of the gRPC ErrorInfo
// detail (in upper case). Codes are never renamed.
type Code string

// The codes, grouped by their HTTP status.
const (
	Invalid              Code = "invalid"                // input fields are wrong; Fields names each
	BadRequest           Code = "bad_request"            // the request as a whole is malformed
	InvalidOTP           Code = "invalid_otp"            // a one-time code is wrong or expired
	InvalidAction        Code = "invalid_action"         // a task-admin action is not one of the known ones
	InvalidAppLabel      Code = "invalid_app_label"      // an app label is not a valid proto package name
	NotAuthenticated     Code = "not_authenticated"      // no credentials were sent
	TokenNotValid        Code = "token_not_valid"        // a token is malformed, expired or revoked
	InvalidCredentials   Code = "invalid_credentials"    // the e-mail or password of a sign-in is wrong
	AuthenticationFailed Code = "authentication_failed"  // HTTP Basic credentials are wrong
	InvalidAPIKey        Code = "invalid_api_key"        // an API key is unknown, revoked or expired
	Forbidden            Code = "forbidden"              // signed in, but not allowed
	CSRFFailed           Code = "csrf_failed"            // a cookie-authenticated change lacks its CSRF token
	NotFound             Code = "not_found"              // the thing named does not exist
	NotGenerated         Code = "not_generated"          // the thing exists once it is generated
	MethodNotAllowed     Code = "method_not_allowed"     // the path exists, the method does not
	Conflict             Code = "conflict"               // an idempotency key is reused for another request, or its first request is still running
	TooLarge             Code = "too_large"              // the input is larger than cfgd accepts
	UnsupportedMediaType Code = "unsupported_media_type" // the body is not application/json (utf-8)
	RateLimited          Code = "rate_limited"           // too many requests; RetryAfter says when to retry
	ClientClosed         Code = "client_closed"          // the client left before the answer (only logged)
	Internal             Code = "internal"               // a bug or an unexpected failure; details are logged
	NotImplemented       Code = "not_implemented"        // the feature is not configured on this server
	Busy                 Code = "busy"                   // too much concurrent activity; retry shortly
	DeliveryFailed       Code = "delivery_failed"        // a message (e-mail) could not be sent
	Unavailable          Code = "unavailable"            // a dependency is down; retry shortly
)

// StatusClientClosed is the HTTP status logged (never seen by anyone)
// when the client left before the answer, as nginx logs it.
const StatusClientClosed = 499

// mapping is one row of the table: what a code is on each transport.
type mapping struct {
	http int
	grpc codes.Code
}

// table is the one place a code meets a transport. A gRPC code is chosen
// for what a gRPC client should do: InvalidArgument for input that will
// fail again unchanged (too_large included: retrying cannot help, so it is
// not ResourceExhausted), Unavailable for what may work on a retry.
var table = map[Code]mapping{
	Invalid:              {http.StatusBadRequest, codes.InvalidArgument},
	BadRequest:           {http.StatusBadRequest, codes.InvalidArgument},
	InvalidOTP:           {http.StatusBadRequest, codes.InvalidArgument},
	InvalidAction:        {http.StatusBadRequest, codes.InvalidArgument},
	InvalidAppLabel:      {http.StatusBadRequest, codes.InvalidArgument},
	NotAuthenticated:     {http.StatusUnauthorized, codes.Unauthenticated},
	TokenNotValid:        {http.StatusUnauthorized, codes.Unauthenticated},
	InvalidCredentials:   {http.StatusUnauthorized, codes.Unauthenticated},
	AuthenticationFailed: {http.StatusUnauthorized, codes.Unauthenticated},
	InvalidAPIKey:        {http.StatusUnauthorized, codes.Unauthenticated},
	Forbidden:            {http.StatusForbidden, codes.PermissionDenied},
	CSRFFailed:           {http.StatusForbidden, codes.PermissionDenied},
	NotFound:             {http.StatusNotFound, codes.NotFound},
	NotGenerated:         {http.StatusNotFound, codes.FailedPrecondition},
	MethodNotAllowed:     {http.StatusMethodNotAllowed, codes.Unimplemented},
	Conflict:             {http.StatusConflict, codes.Aborted},
	TooLarge:             {http.StatusRequestEntityTooLarge, codes.InvalidArgument},
	UnsupportedMediaType: {http.StatusUnsupportedMediaType, codes.InvalidArgument},
	RateLimited:          {http.StatusTooManyRequests, codes.ResourceExhausted},
	ClientClosed:         {StatusClientClosed, codes.Canceled},
	Internal:             {http.StatusInternalServerError, codes.Internal},
	NotImplemented:       {http.StatusNotImplemented, codes.Unimplemented},
	Busy:                 {http.StatusServiceUnavailable, codes.Unavailable},
	DeliveryFailed:       {http.StatusServiceUnavailable, codes.Unavailable},
	Unavailable:          {http.StatusServiceUnavailable, codes.Unavailable},
}

// Codes lists every code, sorted.
func Codes() []Code {
	out := make([]Code, 0, len(table))
	for c := range table {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// HTTPStatus is the HTTP status of c; an unknown code is 500.
func (c Code) HTTPStatus() int {
	if m, ok := table[c]; ok {
		return m.http
	}
	return http.StatusInternalServerError
}

// GRPCCode is the gRPC status code of c; an unknown code is Internal.
func (c Code) GRPCCode() codes.Code {
	if m, ok := table[c]; ok {
		return m.grpc
	}
	return codes.Internal
}

// Reason is c as a gRPC ErrorInfo reason: UPPER_SNAKE_CASE.
func (c Code) Reason() string { return strings.ToUpper(string(c)) }

// Error is an outcome to show the caller.
type Error struct {
	Code Code
	// Message is shown to the caller as is: it never holds secrets or
	// internal detail.
	Message string
	// Fields names each offending input field (JSON name, query parameter
	// or setting) with what is wrong with it.
	Fields map[string]string
	// RetryAfter, when positive, is when a retry may succeed: HTTP
	// Retry-After, gRPC RetryInfo.
	RetryAfter time.Duration
	// Err is the cause: logged for internal and unavailable errors, never
	// shown; errors.Is and errors.As see through to it.
	Err error
}

// Error is the message, then each field with its problem, in name order.
func (e *Error) Error() string {
	switch {
	case len(e.Fields) == 0:
		return e.Message
	case e.Message == "":
		return e.FieldText()
	}
	return e.Message + ": " + e.FieldText()
}

// FieldText is the fields as "name: problem; name: problem", in name order.
func (e *Error) FieldText() string {
	parts := make([]string, 0, len(e.Fields))
	for _, k := range e.FieldNames() {
		parts = append(parts, k+": "+e.Fields[k])
	}
	return strings.Join(parts, "; ")
}

// FieldNames is the names of the offending fields, sorted.
func (e *Error) FieldNames() []string {
	names := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an error with code and message.
func New(code Code, msg string) *Error { return &Error{Code: code, Message: msg} }

// Wrap returns an error with code and message caused by err.
func Wrap(code Code, msg string, err error) *Error {
	return &Error{Code: code, Message: msg, Err: err}
}

// InvalidMessage is the message of Fields errors.
const InvalidMessage = "invalid input"

// Fields returns an Invalid error naming each bad field.
func Fields(fields map[string]string) *Error {
	return &Error{Code: Invalid, Message: InvalidMessage, Fields: fields}
}

// Field returns an Invalid error naming one bad field.
func Field(name, problem string) *Error {
	return Fields(map[string]string{name: problem})
}

// Join merges the field errors among errs into one Invalid error and
// returns the first other error as it is; nil when every err is nil. It is
// how a validator that collects several problems answers with all of them.
func Join(errs ...error) error {
	var fields map[string]string
	for _, err := range errs {
		if err == nil {
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != Invalid {
			return err
		}
		if fields == nil {
			fields = map[string]string{}
		}
		for k, v := range e.Fields {
			fields[k] = v
		}
	}
	if fields == nil {
		return nil
	}
	return Fields(fields)
}

// RetryLater returns a RateLimited error: after is rounded up to whole
// seconds by the transports.
func RetryLater(msg string, after time.Duration) *Error {
	return &Error{Code: RateLimited, Message: msg, RetryAfter: after}
}

// Messages of the errors From makes from a plain error.
const (
	MessageInternal     = "internal error"
	MessageClientClosed = "client closed the request"
	MessageUnavailable  = "a backing service is unavailable, try again shortly"
)

// From is err as an *Error: the *Error in its chain if there is one
// (through errors.As, so a type with an As method can offer one), else a
// classification that shows nothing of err: a cancelled context is
// ClientClosed, a deadline or a network error Unavailable, anything else
// Internal. err is kept as the cause for the log. From(nil) is nil.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return Wrap(ClientClosed, MessageClientClosed, err)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr), postgresUnavailable(err):
		return Wrap(Unavailable, MessageUnavailable, err)
	default:
		return Wrap(Internal, MessageInternal, err)
	}
}

// postgresUnavailable tells a Postgres that is going away or not there
// yet from a fault of cfgd's: a connection it refused or cut (SQLSTATE
// class 08), an operator intervention (57: shut down, crashed, still
// starting up), too many connections (53), or an answer cut off mid-way.
// Found by make chaos: each kill of Postgres answered 500 for about a
// second. The driver's error is matched by its SQLState method, so this
// package (which the reporter library builds on) imports no driver.
func postgresUnavailable(err error) bool {
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		state := pg.SQLState()
		class := state[:min(2, len(state))]
		return class == "08" || class == "57" || class == "53"
	}
	return errors.Is(err, io.ErrUnexpectedEOF)
}

// Logged tells whether a transport logs the cause of e: only failures on
// cfgd's side are worth an operator's attention, not a caller's mistakes.
func (e *Error) Logged() bool {
	switch e.Code {
	case Internal, Unavailable, DeliveryFailed, Busy:
		return true
	}
	return false
}
