package grpcserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/store"
)

// TestEveryCodeAnswersItsStatusAndDetails walks every code through the
// gRPC mapping: the code of errcode's table, the message, and the cfgd
// code as the ErrorInfo reason.
func TestEveryCodeAnswersItsStatusAndDetails(t *testing.T) {
	for _, c := range errcode.Codes() {
		t.Run(string(c), func(t *testing.T) {
			st := StatusOf(errcode.New(c, "what went wrong"))
			if st.Code() != c.GRPCCode() || st.Message() != "what went wrong" {
				t.Fatalf("%s %q, want %s", st.Code(), st.Message(), c.GRPCCode())
			}
			info := detail[*errdetails.ErrorInfo](t, st)
			if info == nil || info.Reason != c.Reason() || info.Domain != ErrorDomain {
				t.Fatalf("ErrorInfo %v, want reason %s", info, c.Reason())
			}
			if len(st.Details()) != 1 {
				t.Fatalf("details %v, want only ErrorInfo", st.Details())
			}
		})
	}
}

func TestFieldsAndRetryBecomeDetails(t *testing.T) {
	st := StatusOf(errcode.Fields(map[string]string{"source_url": "must be http(s)", "identifier": "is not an e-mail address"}))
	if st.Code() != codes.InvalidArgument || st.Message() != "identifier: is not an e-mail address; source_url: must be http(s)" {
		t.Fatalf("%s %q", st.Code(), st.Message())
	}
	bad := detail[*errdetails.BadRequest](t, st)
	if bad == nil || len(bad.FieldViolations) != 2 || bad.FieldViolations[0].Field != "identifier" || bad.FieldViolations[1].Description != "must be http(s)" {
		t.Fatalf("BadRequest %v", bad)
	}

	st = StatusOf(errcode.RetryLater("Too many requests", 1500*time.Millisecond))
	if st.Code() != codes.ResourceExhausted || st.Message() != "Too many requests; retry in 2s" {
		t.Fatalf("%s %q", st.Code(), st.Message())
	}
	if retry := detail[*errdetails.RetryInfo](t, st); retry == nil || retry.RetryDelay.AsDuration() != 1500*time.Millisecond {
		t.Fatalf("RetryInfo %v", retry)
	}
}

// TestAnswerClassifiesPlainErrors: what handlers return becomes the status
// clients see. An event too large used to end as Unavailable, which
// invites a retry that cannot succeed.
func TestAnswerClassifiesPlainErrors(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	made := status.Error(codes.NotFound, "made by a handler")
	tests := []struct {
		name string
		err  error
		want codes.Code
		msg  string
	}{
		{"event too large", fmt.Errorf("append: %w", &store.TooLargeError{Stream: "user-1", Type: "user.profile_updated", Bytes: 2 << 20, Max: 900 << 10}), codes.InvalidArgument, "the request would record more data than cfgd accepts in one event"},
		{"busy", fmt.Errorf("verify: %w", commands.ErrBusy), codes.Unavailable, "too much concurrent activity, try again; retry in 1s"},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "query: context deadline exceeded"},
		{"client gone", fmt.Errorf("query: %w", context.Canceled), codes.Canceled, "query: context canceled"},
		{"a dependency down", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, codes.Unavailable, errcode.MessageUnavailable},
		{"a bug hides its text", errors.New("pq: secret_table"), codes.Internal, errcode.MessageInternal},
		{"a status passes", made, codes.NotFound, "made by a handler"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := status.Convert(answer(context.Background(), quiet, tc.err))
			if st.Code() != tc.want || st.Message() != tc.msg {
				t.Fatalf("%s %q, want %s %q", st.Code(), st.Message(), tc.want, tc.msg)
			}
		})
	}
	if answer(context.Background(), quiet, nil) != nil {
		t.Fatal("no error became an error")
	}
}

func detail[T any](t *testing.T, st *status.Status) T {
	t.Helper()
	var zero T
	for _, d := range st.Details() {
		if v, ok := d.(T); ok {
			return v
		}
	}
	return zero
}
