package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cfgd/cfgd/cmd/internal/rig"
)

// otlpLoad is request logs as OpenTelemetry traces over OTLP/HTTP (JSON):
// each span a gRPC SERVER span whose x-request-id attribute is the
// ledger's id. OTLP has no idempotency key, so an exporter's retry after
// a cut answer may store a span twice: at least once, not exactly once.
// The same over OTLP/gRPC runs beside the gRPC ingest (grpcLoad).
func (ld *loader) otlpLoad(stop, hard context.Context) func() {
	return every(stop, 1, 250*time.Millisecond, func(w, seq int) {
		ld.otlpExport(hard, fmt.Sprintf("c%d-o%d-%d", ld.seed, w, seq), 10, seq)
	})
}

type otlpValue struct {
	StringValue string `json:"stringValue,omitempty"`
	IntValue    string `json:"intValue,omitempty"`
}

type otlpAttr struct {
	Key   string    `json:"key"`
	Value otlpValue `json:"value"`
}

type otlpSpan struct {
	TraceID    string     `json:"traceId"`
	SpanID     string     `json:"spanId"`
	Name       string     `json:"name"`
	Kind       int        `json:"kind"`
	Start      string     `json:"startTimeUnixNano"`
	End        string     `json:"endTimeUnixNano"`
	Attributes []otlpAttr `json:"attributes"`
}

// otlpExport exports n spans over OTLP/HTTP JSON.
func (ld *loader) otlpExport(hard context.Context, id string, n, replica int) {
	now := time.Now()
	ids := otlpIDs(id, n)
	spans := make([]otlpSpan, n)
	for i, rid := range ids {
		spans[i] = otlpSpan{TraceID: hex.EncodeToString(rig.TraceID(rid)), SpanID: hex.EncodeToString(rig.SpanID(rid)), Name: "chaos.v1.Chaos/Otlp", Kind: 2,
			Start: strconv.FormatInt(now.UnixNano(), 10), End: strconv.FormatInt(now.Add(time.Duration(i)*time.Millisecond).UnixNano(), 10),
			Attributes: []otlpAttr{
				{"rpc.system", otlpValue{StringValue: "grpc"}},
				{"rpc.service", otlpValue{StringValue: "chaos.v1.Chaos"}},
				{"rpc.method", otlpValue{StringValue: "Otlp"}},
				{"rpc.grpc.status_code", otlpValue{IntValue: "0"}},
				{"x-request-id", otlpValue{StringValue: rid}},
			}}
	}
	body := map[string]any{"resourceSpans": []any{map[string]any{
		"resource":   map[string]any{"attributes": []otlpAttr{{"service.name", otlpValue{StringValue: "chaos"}}}},
		"scopeSpans": []any{map[string]any{"spans": spans}},
	}}}
	ld.otlpSend(hard, "otlp export", id, ids, replica, func(ctx context.Context, r int) otlpAnswer {
		var res struct {
			PartialSuccess struct {
				RejectedSpans string `json:"rejectedSpans"`
				ErrorMessage  string `json:"errorMessage"`
			} `json:"partialSuccess"`
		}
		code, err := ld.c.do(ctx, r, http.MethodPost, "/v1/traces", body, map[string]string{"X-API-Key": ld.r.key}, &res)
		a := otlpAnswer{status: fmt.Sprint(code), err: err, use: httpUse(code, err), ok: err == nil && code == http.StatusOK,
			retry: retryable(code, err), rejected: res.PartialSuccess.RejectedSpans, why: res.PartialSuccess.ErrorMessage}
		if a.rejected == "0" {
			a.rejected = ""
		}
		return a
	})
}

func otlpIDs(id string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", id, i)
	}
	return ids
}

// otlpAnswer is what one export attempt got back.
type otlpAnswer struct {
	status   string // HTTP status or gRPC code
	err      error
	use      useOutcome
	ok       bool   // exported (2xx, gRPC OK)
	retry    bool   // what an exporter retries
	rejected string // partial success: the spans refused
	why      string
}

// otlpSend sends one export until it is answered, retried on the other
// replica as an OTLP exporter retries (a 5xx, UNAVAILABLE, a cut
// connection), and writes what happened to the ledger. OTLP has no
// idempotency key: the spans of a retried export are at least once.
func (ld *loader) otlpSend(hard context.Context, kind, id string, ids []string, replica int, send func(ctx context.Context, r int) otlpAnswer) {
	ld.l.mu.Lock()
	for _, e := range ids {
		ld.l.sent[e] = true
	}
	ld.l.mu.Unlock()
	for attempt := 0; ; attempt++ {
		r := (replica + attempt) % 2
		ctx, cancel := context.WithTimeout(hard, 10*time.Second)
		start := time.Now()
		a := send(ctx, r)
		cancel()
		ld.hist.write(map[string]any{"ev": "op", "op": strings.ReplaceAll(kind, " ", "_"), "batch": id, "replica": r, "attempt": attempt,
			"status": a.status, "err": errString(a.err), "ms": time.Since(start).Milliseconds()})
		ld.l.used(ld.r.keyID, r, a.use)
		ld.l.mu.Lock()
		if attempt > 0 {
			// A retry of an export that may have been stored.
			for _, e := range ids {
				ld.l.atLeastOnce[e] = true
			}
		}
		ld.l.mu.Unlock()
		switch {
		case a.ok:
			ld.l.mu.Lock()
			if a.rejected != "" {
				ld.l.badIngest = append(ld.l.badIngest, fmt.Sprintf("%s: %s rejected %s spans: %s", id, kind, a.rejected, a.why))
			} else {
				for _, e := range ids {
					ld.l.acked[e] = true
				}
			}
			ld.l.ops[kind+": acknowledged"]++
			if attempt > 0 {
				ld.l.ops[kind+": acknowledged after a retry"]++
			}
			ld.l.mu.Unlock()
			return
		case !a.retry:
			ld.l.mu.Lock()
			ld.l.badIngest = append(ld.l.badIngest, fmt.Sprintf("%s: %s %s on replica %d: %v", id, kind, a.status, r, a.err))
			ld.l.mu.Unlock()
			return
		}
		if a.status == "0" {
			ld.l.op(kind + ": cut")
		} else {
			ld.l.op(kind + ": " + a.status)
		}
		select {
		case <-hard.Done():
			ld.l.op(kind + ": given up unacknowledged")
			return
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// otlpGRPCExport exports n spans over OTLP/gRPC (TraceService/Export on
// the replica's gRPC port, the key in x-api-key metadata).
func (ld *loader) otlpGRPCExport(hard context.Context, clients []coltracepb.TraceServiceClient, id string, n, replica int) {
	ids := otlpIDs(id, n)
	req := rig.OTLPTraces("chaos", "chaos.v1.Chaos", "OtlpGrpc", ids, time.Now())
	ld.otlpSend(hard, "otlp grpc export", id, ids, replica, func(ctx context.Context, r int) otlpAnswer {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", ld.r.key)
		res, err := clients[r].Export(ctx, req)
		code := status.Code(err)
		a := otlpAnswer{status: code.String(), err: err, use: grpcUse(code), ok: err == nil}
		switch code {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
			a.retry = true
		}
		if ps := res.GetPartialSuccess(); ps.GetRejectedSpans() != 0 {
			a.rejected, a.why = fmt.Sprint(ps.GetRejectedSpans()), ps.GetErrorMessage()
		}
		return a
	})
}
