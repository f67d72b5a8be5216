package grpcserver

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// ErrorDomain is the domain of the ErrorInfo detail of every error cfgd
// answers; its reason is the errcode code in upper case (INVALID_OTP).
const ErrorDomain = "cfgd"

// StatusOf is e as a gRPC status: the code errcode's table gives, e's
// message (a field error says "field: problem; field: problem", and a
// retry hint adds "; retry in Ns"), and details a client can read without
// parsing text: ErrorInfo (the cfgd code), BadRequest (one violation per
// field, in name order) and RetryInfo.
func StatusOf(e *errcode.Error) *status.Status {
	msg := e.Message
	if len(e.Fields) > 0 {
		msg = e.FieldText()
	}
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: e.Code.Reason(), Domain: ErrorDomain}}
	if len(e.Fields) > 0 {
		bad := &errdetails.BadRequest{}
		for _, f := range e.FieldNames() {
			bad.FieldViolations = append(bad.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: f, Description: e.Fields[f]})
		}
		details = append(details, bad)
	}
	if e.RetryAfter > 0 {
		secs := max(1, int((e.RetryAfter+999_999_999)/1_000_000_000))
		msg += "; retry in " + strconv.Itoa(secs) + "s"
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	st := status.New(e.Code.GRPCCode(), msg)
	// WithDetails fails only on a detail that cannot be marshalled, which
	// these cannot; the status without details is still right then.
	if d, err := st.WithDetails(details...); err == nil {
		st = d
	}
	return st
}

// answer is the status a call ends with: a status a handler (or gRPC
// itself) made passes as it is, a context's end becomes Canceled or
// DeadlineExceeded, and any other error goes through errcode.From and
// StatusOf. A failure on cfgd's side is logged with its cause, which the
// caller never sees.
func answer(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var e *errcode.Error
	if !errors.As(err, &e) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// gRPC has codes of its own for these: Canceled, DeadlineExceeded.
		return status.FromContextError(err).Err()
	}
	e = errcode.From(err)
	switch {
	case e.Code == errcode.Internal && e.Err == nil:
		// Made on purpose (a recovered panic): logged where it was made.
	case e.Code == errcode.Internal:
		log.ErrorContext(ctx, "grpc call failed", "err", e.Err)
	case e.Logged():
		log.WarnContext(ctx, "grpc call failed on a dependency", "code", string(e.Code), "err", err)
	}
	return StatusOf(e).Err()
}

// Handlers return errors (an *errcode.Error, or whatever went wrong);
// these interceptors give each its status, once, for every service.
func unaryAnswer(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		return resp, answer(ctx, log, err)
	}
}

func streamAnswer(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return answer(ss.Context(), log, handler(srv, ss))
	}
}
