package grpcserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
)

// Producer takes validated events to the request-log topic; it fails with
// an error wrapping requestlog.ErrUnavailable, within its timeout, when
// Kafka cannot take them.
type Producer interface {
	Produce(ctx context.Context, events []requestlog.Event) error
}

// MaxReportedErrors bounds the field errors one Report answer lists.
const MaxReportedErrors = 1000

// Ingest serves cfgd.ingest.v1: other servers' request logs, for API key
// holders and staff.
type Ingest struct {
	ingestv1.UnimplementedIngestServiceServer
	producer Producer
	accept   *requestlog.Accepter
	log      *slog.Logger
}

// DefaultRetentionDays is the sink's default retention, the created_at
// window until WithWindow sets the configured one.
const DefaultRetentionDays = 30

// NewIngest returns the service; with a nil producer it answers
// Unimplemented.
func NewIngest(p Producer, now func() time.Time, log *slog.Logger) *Ingest {
	a := &requestlog.Accepter{Now: now, Window: requestlog.WindowFor(DefaultRetentionDays)}
	if p != nil {
		a.Produce = p.Produce
	}
	return &Ingest{producer: p, accept: a, log: log}
}

// WithWindow makes Report refuse events whose created_at is outside w
// (requestlog.WindowFor the sink's retention); it returns s.
func (s *Ingest) WithWindow(w requestlog.Window) *Ingest {
	s.accept.Window = w
	return s
}

// Report implements IngestService.Report. Each message is validated and
// produced before the next is read, so memory is one message and Kafka's
// pace reaches the client as flow control.
func (s *Ingest) Report(stream grpc.ClientStreamingServer[ingestv1.ReportRequest, ingestv1.ReportResponse]) error {
	ctx := stream.Context()
	if s.producer == nil {
		return errcode.New(errcode.NotImplemented, "the request log is not configured on this server")
	}
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return errcode.New(errcode.NotAuthenticated, "not authenticated")
	}
	if p.Via != ViaAPIKey && !p.Staff {
		return errcode.New(errcode.Forbidden, "an API key (x-api-key) or a staff user is required")
	}
	res := &ingestv1.ReportResponse{}
	var base int64
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if res.Accepted == 0 && res.Rejected > 0 {
				// Nothing stored: an error, which a client may retry
				// without doubling a count.
				return requestlog.Refusal(fieldErrors(res.Errors))
			}
			return stream.SendAndClose(res)
		}
		if err != nil {
			return err
		}
		n := len(msg.GetEvents())
		if n > requestlog.MaxBatchEvents {
			return errcode.New(errcode.BadRequest, fmt.Sprintf("events: at most %d per message, got %d (events before this message were accepted: %d)", requestlog.MaxBatchEvents, n, res.Accepted))
		}
		batch := make([]requestlog.Event, n)
		for i, e := range msg.GetEvents() {
			batch[i] = fromProto(e)
		}
		out, err := s.accept.Accept(ctx, batch, nil)
		var refusal *errcode.Error
		if err != nil && !(errors.As(err, &refusal) && refusal.Code == errcode.Invalid) {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			var e *errcode.Error
			if errors.As(err, &e) && e.Code == errcode.Unavailable {
				return &errcode.Error{Code: errcode.Unavailable, Message: fmt.Sprintf("the request-log queue is unavailable, retry shortly (events accepted before this message: %d)", res.Accepted), Err: err}
			}
			return err
		}
		res.Accepted += int64(out.Accepted)
		res.Rejected += int64(out.Rejected)
		for _, fe := range out.Errors {
			if len(res.Errors) >= MaxReportedErrors {
				break
			}
			res.Errors = append(res.Errors, &ingestv1.FieldError{Index: base + int64(fe.Index), Field: fe.Field, Message: fe.Message})
		}
		base += int64(n)
	}
}

func fromProto(e *ingestv1.Event) requestlog.Event {
	out := requestlog.Event{
		RequestID: e.GetRequestId(), ServiceName: e.GetServiceName(), MethodName: e.GetMethodName(), Status: e.GetStatus(),
		DurationMS: e.GetDurationMs(), GRPCStatusCode: e.GetGrpcStatusCode(), ErrorMessage: e.GetErrorMessage(),
		ClientIP: e.GetClientIp(), UserID: e.GetUserId(), Username: e.GetUsername(), IsAuthenticated: e.GetIsAuthenticated(),
		APIKeyID: e.GetApiKeyId(), APIKeyName: e.GetApiKeyName(),
	}
	if ts := e.GetCreatedAt(); ts != nil {
		out.CreatedAt = ts.AsTime()
	}
	return out
}

func fieldErrors(in []*ingestv1.FieldError) []requestlog.FieldError {
	out := make([]requestlog.FieldError, len(in))
	for i, fe := range in {
		out[i] = requestlog.FieldError{Index: int(fe.GetIndex()), Field: fe.GetField(), Message: fe.GetMessage()}
	}
	return out
}
