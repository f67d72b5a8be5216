package errcode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
)

// TestEveryCodeMapsOnBothTransports walks every code through both
// mappings. The expected rows are written out here on purpose: changing
// what a code means to clients must change this test and docs/errors.md.
func TestEveryCodeMapsOnBothTransports(t *testing.T) {
	want := []struct {
		code Code
		http int
		grpc codes.Code
	}{
		{AuthenticationFailed, http.StatusUnauthorized, codes.Unauthenticated},
		{BadRequest, http.StatusBadRequest, codes.InvalidArgument},
		{Busy, http.StatusServiceUnavailable, codes.Unavailable},
		{CSRFFailed, http.StatusForbidden, codes.PermissionDenied},
		{ClientClosed, 499, codes.Canceled},
		{Conflict, http.StatusConflict, codes.Aborted},
		{DeliveryFailed, http.StatusServiceUnavailable, codes.Unavailable},
		{Forbidden, http.StatusForbidden, codes.PermissionDenied},
		{Internal, http.StatusInternalServerError, codes.Internal},
		{InvalidAPIKey, http.StatusUnauthorized, codes.Unauthenticated},
		{Invalid, http.StatusBadRequest, codes.InvalidArgument},
		{InvalidAction, http.StatusBadRequest, codes.InvalidArgument},
		{InvalidAppLabel, http.StatusBadRequest, codes.InvalidArgument},
		{InvalidCredentials, http.StatusUnauthorized, codes.Unauthenticated},
		{InvalidOTP, http.StatusBadRequest, codes.InvalidArgument},
		{MethodNotAllowed, http.StatusMethodNotAllowed, codes.Unimplemented},
		{NotAuthenticated, http.StatusUnauthorized, codes.Unauthenticated},
		{NotFound, http.StatusNotFound, codes.NotFound},
		{NotGenerated, http.StatusNotFound, codes.FailedPrecondition},
		{NotImplemented, http.StatusNotImplemented, codes.Unimplemented},
		{RateLimited, http.StatusTooManyRequests, codes.ResourceExhausted},
		{TokenNotValid, http.StatusUnauthorized, codes.Unauthenticated},
		// Retrying the same input cannot help: not Unavailable, not
		// ResourceExhausted (which invites a retry).
		{TooLarge, http.StatusRequestEntityTooLarge, codes.InvalidArgument},
		{Unavailable, http.StatusServiceUnavailable, codes.Unavailable},
		{UnsupportedMediaType, http.StatusUnsupportedMediaType, codes.InvalidArgument},
	}
	var listed []Code
	for _, tc := range want {
		listed = append(listed, tc.code)
		t.Run(string(tc.code), func(t *testing.T) {
			if got := tc.code.HTTPStatus(); got != tc.http {
				t.Errorf("HTTP status %d, want %d", got, tc.http)
			}
			if got := tc.code.GRPCCode(); got != tc.grpc {
				t.Errorf("gRPC code %s, want %s", got, tc.grpc)
			}
			// Only 5xx answers may be failures on cfgd's side.
			if tc.http < 500 && tc.code != ClientClosed && New(tc.code, "").Logged() {
				t.Errorf("a %d is logged as cfgd's failure", tc.http)
			}
		})
	}
	slices.Sort(listed)
	if !slices.Equal(listed, Codes()) {
		t.Fatalf("codes in the table %v, want exactly %v", Codes(), listed)
	}
}

func TestUnknownCodeIsInternal(t *testing.T) {
	c := Code("no_such_code")
	if c.HTTPStatus() != http.StatusInternalServerError || c.GRPCCode() != codes.Internal {
		t.Fatalf("unknown code maps to %d / %s", c.HTTPStatus(), c.GRPCCode())
	}
}

func TestReasonIsUpperSnake(t *testing.T) {
	if got := InvalidAPIKey.Reason(); got != "INVALID_API_KEY" {
		t.Fatalf("reason %q", got)
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{"message", New(NotFound, "API key not found"), "API key not found"},
		{"fields in name order", Fields(map[string]string{"name": "is required", "key_type": "must be one of a, b"}), "invalid input: key_type: must be one of a, b; name: is required"},
		{"one field", Field("days", "must be a whole number"), "invalid input: days: must be a whole number"},
		{"fields alone", &Error{Code: Invalid, Fields: map[string]string{"HTTP__ADDR": "expected host:port"}}, "HTTP__ADDR: expected host:port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}

func TestFrom(t *testing.T) {
	sentinel := New(InvalidOTP, "Invalid or expired code")
	tests := []struct {
		name    string
		err     error
		want    Code
		message string
	}{
		{"an *Error as is", fmt.Errorf("verify: %w", sentinel), InvalidOTP, "Invalid or expired code"},
		{"a sentinel with a cause", fmt.Errorf("%w: %w", sentinel, errors.New("smtp said no")), InvalidOTP, "Invalid or expired code"},
		{"offered through As", fmt.Errorf("append: %w", offersCode{}), TooLarge, "offered"},
		{"client gone", fmt.Errorf("query: %w", context.Canceled), ClientClosed, MessageClientClosed},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), Unavailable, MessageUnavailable},
		{"network", fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), Unavailable, MessageUnavailable},
		{"postgres shut down", fmt.Errorf("load session: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to unexpected postmaster exit"}), Unavailable, MessageUnavailable},
		{"postgres starting up", fmt.Errorf("load revocations: %w", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}), Unavailable, MessageUnavailable},
		{"postgres connection failure", fmt.Errorf("claim: %w", &pgconn.PgError{Code: "08006"}), Unavailable, MessageUnavailable},
		{"postgres too many connections", fmt.Errorf("claim: %w", &pgconn.PgError{Code: "53300"}), Unavailable, MessageUnavailable},
		{"an answer cut off", fmt.Errorf("query: %w", io.ErrUnexpectedEOF), Unavailable, MessageUnavailable},
		{"a postgres error of cfgd's", fmt.Errorf("insert: %w", &pgconn.PgError{Code: "23505", Message: "duplicate key"}), Internal, MessageInternal},
		{"anything else hides its text", errors.New("pq: secret column"), Internal, MessageInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := From(tc.err)
			if got.Code != tc.want || got.Message != tc.message {
				t.Fatalf("From = %s %q, want %s %q", got.Code, got.Message, tc.want, tc.message)
			}
			if !errors.Is(got, tc.err) && !errors.Is(tc.err, got) && !errors.As(got, new(offersCode)) {
				t.Fatalf("the cause is lost: %v", got)
			}
		})
	}
	if From(nil) != nil {
		t.Fatal("From(nil) is not nil")
	}
}

type offersCode struct{}

func (offersCode) Error() string { return "offers a code" }
func (o offersCode) As(target any) bool {
	if p, ok := target.(**Error); ok {
		*p = Wrap(TooLarge, "offered", o)
		return true
	}
	return false
}

// A sentinel *Error is matched by identity, as errors.New's are: two
// sentinels with one code and message stay two errors.
func TestSentinelsMatchByIdentity(t *testing.T) {
	sentinel := New(Busy, "too much concurrent activity")
	wrapped := fmt.Errorf("verify: %w: %w", sentinel, context.Canceled)
	if !errors.Is(wrapped, sentinel) || !errors.Is(wrapped, context.Canceled) {
		t.Fatalf("errors.Is lost the sentinel or the cause: %v", wrapped)
	}
	if errors.Is(New(Busy, "too much concurrent activity"), sentinel) {
		t.Fatal("another error with the same code and message matched the sentinel")
	}
}

func TestJoin(t *testing.T) {
	other := errors.New("db down")
	tests := []struct {
		name string
		errs []error
		want error // nil, other, or the merged fields below
	}{
		{"none", nil, nil},
		{"all nil", []error{nil, nil}, nil},
		{"fields merge", []error{Field("page", "must be at least 1"), nil, fmt.Errorf("filter: %w", Field("status", "must be one of ok, error"))}, Fields(map[string]string{"page": "must be at least 1", "status": "must be one of ok, error"})},
		{"another error wins", []error{Field("page", "x"), other}, other},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Join(tc.errs...)
			switch want := tc.want.(type) {
			case nil:
				if got != nil {
					t.Fatalf("Join = %v, want nil", got)
				}
			case *Error:
				if got == nil || got.Error() != want.Error() {
					t.Fatalf("Join = %v, want %v", got, want)
				}
			default:
				if got != want {
					t.Fatalf("Join = %v, want %v", got, want)
				}
			}
		})
	}
}

func TestRetryLater(t *testing.T) {
	e := RetryLater("Too many requests", 1500*time.Millisecond)
	if e.Code != RateLimited || e.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("%+v", e)
	}
}
