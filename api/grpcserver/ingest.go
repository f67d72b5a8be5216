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

	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlog/ingestmetrics"
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
	now      func() time.Time
	log      *slog.Logger
	metrics  *ingestmetrics.Metrics
}

// NewIngest returns the service; with a nil producer it answers
// Unimplemented.
func NewIngest(p Producer, now func() time.Time, log *slog.Logger) *Ingest {
	return &Ingest{producer: p, now: now, log: log}
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
			return stream.SendAndClose(res)
		}
		if err != nil {
			return err
		}
		n := len(msg.GetEvents())
		if n > requestlog.MaxBatchEvents {
			s.metrics.Rejected(ingestmetrics.GRPC, ingestmetrics.Malformed, 1)
			return errcode.New(errcode.BadRequest, fmt.Sprintf("events: at most %d per message, got %d (events before this message were accepted: %d)", requestlog.MaxBatchEvents, n, res.Accepted))
		}
		batch := make([]requestlog.Event, n)
		for i, e := range msg.GetEvents() {
			batch[i] = fromProto(e)
		}
		valid, problems := requestlog.Validate(batch, s.now().UTC())
		if err := s.producer.Produce(ctx, valid); err != nil {
			if errors.Is(err, requestlog.ErrUnavailable) {
				return &errcode.Error{Code: errcode.Unavailable, Message: fmt.Sprintf("the request-log queue is unavailable, retry shortly (events accepted before this message: %d)", res.Accepted), Err: err}
			}
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return fmt.Errorf("request-log ingest: %w", err)
		}
		res.Accepted += int64(len(valid))
		res.Rejected += int64(n - len(valid))
		s.metrics.Rejected(ingestmetrics.GRPC, ingestmetrics.Invalid, n-len(valid))
		for _, fe := range problems {
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
