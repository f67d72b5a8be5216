// Package reporter lets another Go gRPC server report every call it serves
// to cfgd's request log (cfgd.ingest.v1.IngestService/Report), in batches
// from a bounded queue. When cfgd is slow or down, events are dropped and
// counted (Dropped); the reported calls are never blocked or failed.
//
//	conn, _ := grpc.NewClient("cfgd:9090", grpc.WithTransportCredentials(insecure.NewCredentials()))
//	rep, _ := reporter.New(conn, reporter.Config{APIKey: os.Getenv("CFGD_API_KEY")}, slog.Default())
//	go rep.Run(ctx) // returns after a last flush once ctx ends
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(rep.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(rep.StreamServerInterceptor()))
package reporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	"github.com/cfgd/cfgd/events/requestlog"
)

// Config of a Reporter.
type Config struct {
	// APIKey is sent in x-api-key; cfgd refuses reports without one.
	APIKey string
	// Batch bounds the queue, the batch size and the time one send may
	// take (requestlog.DefaultBatcherConfig when zero).
	Batch requestlog.BatcherConfig
	// Skip, when set, leaves out the calls whose full method
	// ("/pkg.Service/Method") it accepts, such as health checks.
	Skip func(fullMethod string) bool
	// Enrich, when set, adds what only the server knows to each event:
	// the user (UserID, Username, IsAuthenticated) or an API key.
	Enrich func(ctx context.Context, e *requestlog.Event)
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.APIKey == "" {
		errs = append(errs, errors.New("reporter: an API key is required"))
	}
	errs = append(errs, c.Batch.Validate())
	return errors.Join(errs...)
}

// Reporter records served calls and ships them to cfgd.
type Reporter struct {
	cfg     Config
	client  ingestv1.IngestServiceClient
	batcher *requestlog.Batcher
}

// New returns a reporter sending over conn (a connection to cfgd's gRPC
// address); start Run.
func New(conn grpc.ClientConnInterface, cfg Config, log *slog.Logger) (*Reporter, error) {
	if cfg.Batch == (requestlog.BatcherConfig{}) {
		cfg.Batch = requestlog.DefaultBatcherConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Reporter{cfg: cfg, client: ingestv1.NewIngestServiceClient(conn)}
	b, err := requestlog.NewBatcher(cfg.Batch, r.send, log)
	if err != nil {
		return nil, err
	}
	r.batcher = b
	return r, nil
}

// Run ships batches until ctx ends, then makes one last bounded flush.
func (r *Reporter) Run(ctx context.Context) error { return r.batcher.Run(ctx) }

// Sent counts the events cfgd accepted or rejected as invalid.
func (r *Reporter) Sent() int64 { return r.batcher.Sent() }

// Dropped counts the events lost because cfgd was slow, down or refused
// the batch, or the queue was full.
func (r *Reporter) Dropped() int64 { return r.batcher.Dropped() }

// Report queues events built elsewhere (never blocks).
func (r *Reporter) Report(ctx context.Context, events []requestlog.Event) {
	r.batcher.Report(ctx, events)
}

func (r *Reporter) send(ctx context.Context, events []requestlog.Event) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", r.cfg.APIKey)
	// WaitForReady(false) is the default: a down cfgd fails the send at
	// once rather than waiting for the connection.
	stream, err := r.client.Report(ctx)
	if err != nil {
		return fmt.Errorf("report to cfgd: %w", err)
	}
	msg := &ingestv1.ReportRequest{Events: make([]*ingestv1.Event, len(events))}
	for i, e := range events {
		msg.Events[i] = ToProto(e)
	}
	// io.EOF from Send means cfgd ended the stream; CloseAndRecv says why.
	if err := stream.Send(msg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("report to cfgd: %w", err)
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		return fmt.Errorf("report to cfgd: %w", err)
	}
	return nil
}

// ToProto is the wire form of e.
func ToProto(e requestlog.Event) *ingestv1.Event {
	out := &ingestv1.Event{
		RequestId: e.RequestID, ServiceName: e.ServiceName, MethodName: e.MethodName, Status: e.Status,
		DurationMs: e.DurationMS, GrpcStatusCode: e.GRPCStatusCode, ErrorMessage: e.ErrorMessage,
		ClientIp: e.ClientIP, UserId: e.UserID, Username: e.Username, IsAuthenticated: e.IsAuthenticated,
		ApiKeyId: e.APIKeyID, ApiKeyName: e.APIKeyName,
	}
	if !e.CreatedAt.IsZero() {
		out.CreatedAt = timestamppb.New(e.CreatedAt)
	}
	return out
}

func (r *Reporter) record(ctx context.Context, fullMethod string, start time.Time, err error) {
	st := status.Convert(err)
	c := requestlog.Call{FullMethod: fullMethod, Code: uint32(st.Code()), Message: st.Message(), Start: start, End: time.Now()}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.Peer = p.Addr.String()
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if ids := md.Get("x-request-id"); len(ids) > 0 {
			c.RequestID = ids[0]
		}
	}
	e := requestlog.FromCall(c)
	if r.cfg.Enrich != nil {
		r.cfg.Enrich(ctx, &e)
	}
	r.batcher.Report(ctx, []requestlog.Event{e})
}

// UnaryServerInterceptor reports each unary call once it has finished.
func (r *Reporter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r.cfg.Skip != nil && r.cfg.Skip(info.FullMethod) {
			return h(ctx, req)
		}
		start := time.Now()
		resp, err := h(ctx, req)
		r.record(ctx, info.FullMethod, start, err)
		return resp, err
	}
}

// StreamServerInterceptor reports each streaming call once it has finished.
func (r *Reporter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if r.cfg.Skip != nil && r.cfg.Skip(info.FullMethod) {
			return h(srv, ss)
		}
		start := time.Now()
		err := h(srv, ss)
		r.record(ss.Context(), info.FullMethod, start, err)
		return err
	}
}
