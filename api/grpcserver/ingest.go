package grpcserver

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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

// MetadataIdempotencyKey is the metadata key naming a Report call, as
// Idempotency-Key does on HTTP: its retries within 24 h get its first
// answer and count nothing again.
const MetadataIdempotencyKey = "idempotency-key"

// MaxReportedErrors bounds the field errors one Report answer lists.
const MaxReportedErrors = 1000

// Ingest serves cfgd.ingest.v1: other servers' request logs, for API key
// holders and staff.
type Ingest struct {
	ingestv1.UnimplementedIngestServiceServer
	producer Producer
	accept   *requestlog.Accepter
	log      *slog.Logger
	metrics  *ingestmetrics.Metrics
}

// WithIdempotency makes Report honour the idempotency-key metadata
// through store (the accept path's protocol, requestlog.Accepter.Once);
// it returns s.
func (s *Ingest) WithIdempotency(store requestlog.KeyStore) *Ingest {
	s.accept.Keys = store
	s.accept.Log = s.log
	return s
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
	if md, ok := metadata.FromIncomingContext(ctx); ok && s.accept.Keys != nil {
		if keys := md.Get(MetadataIdempotencyKey); len(keys) > 0 {
			return s.reportOnce(stream, p, keys[0])
		}
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
			s.metrics.Rejected(ingestmetrics.GRPC, ingestmetrics.Malformed, 1)
			return errcode.New(errcode.BadRequest, fmt.Sprintf("events: at most %d per message, got %d (events before this message were accepted: %d)", requestlog.MaxBatchEvents, n, res.Accepted))
		}
		batch := make([]requestlog.Event, n)
		for i, e := range msg.GetEvents() {
			batch[i] = fromProto(e)
		}
		batch = requestlog.ReportedAs(batch, reporter(p))
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
		s.metrics.Rejected(ingestmetrics.GRPC, ingestmetrics.Invalid, out.Rejected)
		for _, fe := range out.Errors {
			if len(res.Errors) >= MaxReportedErrors {
				break
			}
			res.Errors = append(res.Errors, &ingestv1.FieldError{Index: base + int64(fe.Index), Field: fe.Field, Message: fe.Message})
		}
		base += int64(n)
	}
}

// reporter names who posted a report: the API key, or the staff user.
func reporter(p Principal) string {
	if p.Via == ViaAPIKey {
		return requestlog.ReportedByKey(p.KeyID)
	}
	return requestlog.ReportedByUser(p.UserID)
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

// reportOnce is Report under an idempotency key: the key is checked
// before anything is read, each message is checked as it arrives (at
// most MaxBatchEvents events and requestlog.MaxKeyedBytes in all, only
// the valid events held), and at the end the stream is claimed by its
// hash and accepted as one batch, or answered with the outcome of an
// earlier call.
func (s *Ingest) reportOnce(stream grpc.ClientStreamingServer[ingestv1.ReportRequest, ingestv1.ReportResponse], p Principal, key string) error {
	ctx := stream.Context()
	caller := requestlog.UserCaller(p.UserID)
	if p.Via == ViaAPIKey {
		caller = requestlog.KeyCaller(p.KeyID)
	}
	if err := s.accept.Admit(ctx, caller, key); err != nil {
		return err
	}
	sum := sha256.New()
	batch := s.accept.Pending()
	var wire []byte
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		n := len(msg.GetEvents())
		if n > requestlog.MaxBatchEvents {
			s.metrics.Rejected(ingestmetrics.GRPC, ingestmetrics.Malformed, 1)
			return errcode.New(errcode.TooLarge, fmt.Sprintf("events: at most %d per call with an idempotency key", requestlog.MaxBatchEvents))
		}
		// The hash is of each message's deterministic encoding, length
		// first; one buffer serves every message.
		wire, err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(wire[:0], msg)
		if err != nil {
			return fmt.Errorf("request-log ingest: %w", err)
		}
		_ = binary.Write(sum, binary.BigEndian, uint64(len(wire)))
		sum.Write(wire)
		events := make([]requestlog.Event, n)
		for i, e := range msg.GetEvents() {
			events[i] = fromProto(e)
		}
		if err := batch.Add(requestlog.ReportedAs(events, reporter(p)), len(wire)); err != nil {
			s.metrics.Rejected(ingestmetrics.GRPC, ingestmetrics.Malformed, 1)
			return err
		}
	}
	out, _, err := s.accept.Once(ctx, caller, key, sum.Sum(nil), func(ctx context.Context) (requestlog.Outcome, error) {
		out, err := batch.Accept(ctx)
		s.metrics.Rejected(ingestmetrics.GRPC, ingestmetrics.Invalid, out.Rejected)
		return out, err
	})
	if err != nil {
		return err
	}
	res := &ingestv1.ReportResponse{Accepted: int64(out.Accepted), Rejected: int64(out.Rejected)}
	for _, fe := range out.Errors {
		res.Errors = append(res.Errors, &ingestv1.FieldError{Index: int64(fe.Index), Field: fe.Field, Message: fe.Message})
	}
	return stream.SendAndClose(res)
}
