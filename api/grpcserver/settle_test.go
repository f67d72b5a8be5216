package grpcserver_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cfgd/cfgd/api/grpcserver"
	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// reportStream is a Report call of msgs, as the server sees it.
type reportStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*ingestv1.ReportRequest
	res  *ingestv1.ReportResponse
}

func (s *reportStream) Context() context.Context { return s.ctx }

func (s *reportStream) Recv() (*ingestv1.ReportRequest, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func (s *reportStream) SendAndClose(r *ingestv1.ReportResponse) error {
	s.res = r
	return nil
}

// Chaos finding 2 over gRPC: a keyed Report answered UNAVAILABLE while the
// producer still holds its record keeps its key (a retry meanwhile is
// ABORTED, in progress) and, once the record is stored, is answered with
// its outcome without storing it again.
func TestRetriedUnavailableReportIsStoredOnce(t *testing.T) {
	t.Parallel()
	p, c, open := testenv.HeldProducer(t, false)
	ing := grpcserver.NewIngest(p, time.Now, testenv.Quiet()).
		WithIdempotency(requestlogview.NewIdempotency(testenv.Postgres(t), time.Now, 100*time.Millisecond))
	ctx := metadata.NewIncomingContext(grpcserver.WithPrincipal(context.Background(), grpcserver.Principal{KeyID: 1, Via: grpcserver.ViaAPIKey}),
		metadata.Pairs(grpcserver.MetadataIdempotencyKey, "k"))
	report := func() (*ingestv1.ReportResponse, error) {
		s := &reportStream{ctx: ctx, msgs: []*ingestv1.ReportRequest{{Events: []*ingestv1.Event{
			{ServiceName: "settle.Svc", MethodName: "A", Status: "success"},
			{ServiceName: "settle.Svc", MethodName: "B", Status: "bogus"},
		}}}}
		err := ing.Report(s)
		return s.res, err
	}
	code := func(err error) errcode.Code {
		if e, ok := errors.AsType[*errcode.Error](err); ok {
			return e.Code
		}
		return ""
	}

	if _, err := report(); code(err) != errcode.Unavailable {
		t.Fatalf("first: %v, want unavailable (the broker holds the record)", err)
	}
	_, heldErr := report()
	open()
	var res *ingestv1.ReportResponse
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err = report()
		if c := code(err); (c != errcode.Conflict && c != errcode.Unavailable) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, events := testenv.StoredRequestLogs(t, c, p); events != 1 {
		t.Fatalf("%d events in Kafka, want the call's one event once", events)
	}
	if code(heldErr) != errcode.Conflict {
		t.Fatalf("retry while held: %v", heldErr)
	}
	if err != nil || res.GetAccepted() != 1 || res.GetRejected() != 1 || len(res.GetErrors()) != 1 || res.GetErrors()[0].GetIndex() != 1 {
		t.Fatalf("retry after the record landed: %v %v", res, err)
	}
}
