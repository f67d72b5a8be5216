package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"

	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	"github.com/cfgd/cfgd/cmd/internal/rig"
)

// grpcLoad is request logs over gRPC (IngestService/Report, one message
// a batch) with the ingest key and an idempotency-key, retried on the
// other replica as the REST batches are; and OTLP/gRPC trace exports
// (TraceService/Export) on the same ports.
func (ld *loader) grpcLoad(stop, hard context.Context) (func(), error) {
	var clients []ingestv1.IngestServiceClient
	var otlp []coltracepb.TraceServiceClient
	var conns []*grpc.ClientConn
	for i := range ld.r.serveURL {
		conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", ld.r.port(20+i)), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		conns = append(conns, conn)
		clients = append(clients, ingestv1.NewIngestServiceClient(conn))
		otlp = append(otlp, coltracepb.NewTraceServiceClient(conn))
	}
	wait := every(stop, 2, 200*time.Millisecond, func(w, seq int) {
		ld.grpcBatch(hard, clients, fmt.Sprintf("c%d-g%d-%d", ld.seed, w, seq), 20, w)
	})
	waitOTLP := every(stop, 1, 250*time.Millisecond, func(w, seq int) {
		ld.otlpGRPCExport(hard, otlp, fmt.Sprintf("c%d-og%d-%d", ld.seed, w, seq), 10, seq)
	})
	return func() {
		wait()
		waitOTLP()
		for _, c := range conns {
			_ = c.Close()
		}
	}, nil
}

func (ld *loader) grpcBatch(hard context.Context, clients []ingestv1.IngestServiceClient, id string, n, replica int) {
	evs := make([]*ingestv1.Event, n)
	ld.l.mu.Lock()
	for i := range evs {
		evs[i] = &ingestv1.Event{RequestId: fmt.Sprintf("%s-%d", id, i), ServiceName: "chaos", MethodName: "Report", Status: "success", DurationMs: int64(i % 50)}
		ld.l.sent[evs[i].RequestId] = true
	}
	ld.l.mu.Unlock()
	for attempt := 0; ; attempt++ {
		r := (replica + attempt) % len(clients)
		start := time.Now()
		accepted, err := rig.Report(hard, clients[r], ld.r.key, id, evs)
		code := status.Code(err)
		ld.hist.write(map[string]any{"ev": "op", "op": "grpc_ingest", "batch": id, "replica": r, "attempt": attempt,
			"code": code.String(), "err": errString(err), "ms": time.Since(start).Milliseconds()})
		ld.l.used(ld.r.keyID, r, grpcUse(code))
		if err == nil {
			ld.l.mu.Lock()
			if accepted != int64(n) {
				ld.l.badIngest = append(ld.l.badIngest, fmt.Sprintf("%s: gRPC accepted %d of %d", id, accepted, n))
			} else {
				for _, e := range evs {
					ld.l.acked[e.RequestId] = true
				}
			}
			ld.l.ops["grpc ingest: batch acknowledged"]++
			if attempt > 0 {
				ld.l.ops["grpc ingest: acknowledged after a retry"]++
			}
			ld.l.mu.Unlock()
			return
		}
		switch code {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
			ld.l.op("grpc ingest: " + code.String())
		default:
			ld.l.mu.Lock()
			ld.l.badIngest = append(ld.l.badIngest, fmt.Sprintf("%s: gRPC %s on replica %d", id, err, r))
			ld.l.mu.Unlock()
			return
		}
		select {
		case <-hard.Done():
			ld.l.op("grpc ingest: batch given up unacknowledged")
			return
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
}
