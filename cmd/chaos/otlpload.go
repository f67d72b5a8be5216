package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// otlpLoad is request logs as OpenTelemetry traces over OTLP/HTTP (JSON):
// each span a gRPC SERVER span whose x-request-id attribute is the
// ledger's id. OTLP has no idempotency key, so an exporter's retry after
// a cut answer may store a span twice: at least once, not exactly once.
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

func hexID(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:n])
}

func (ld *loader) otlpExport(hard context.Context, id string, n, replica int) {
	now := time.Now()
	spans := make([]otlpSpan, n)
	ids := make([]string, n)
	for i := range spans {
		ids[i] = fmt.Sprintf("%s-%d", id, i)
		spans[i] = otlpSpan{TraceID: hexID(ids[i], 16), SpanID: hexID(ids[i]+"s", 8), Name: "chaos.v1.Chaos/Otlp", Kind: 2,
			Start: strconv.FormatInt(now.UnixNano(), 10), End: strconv.FormatInt(now.Add(time.Duration(i)*time.Millisecond).UnixNano(), 10),
			Attributes: []otlpAttr{
				{"rpc.system", otlpValue{StringValue: "grpc"}},
				{"rpc.service", otlpValue{StringValue: "chaos.v1.Chaos"}},
				{"rpc.method", otlpValue{StringValue: "Otlp"}},
				{"rpc.grpc.status_code", otlpValue{IntValue: "0"}},
				{"x-request-id", otlpValue{StringValue: ids[i]}},
			}}
	}
	body := map[string]any{"resourceSpans": []any{map[string]any{
		"resource":   map[string]any{"attributes": []otlpAttr{{"service.name", otlpValue{StringValue: "chaos"}}}},
		"scopeSpans": []any{map[string]any{"spans": spans}},
	}}}
	ld.l.mu.Lock()
	for _, e := range ids {
		ld.l.sent[e] = true
	}
	ld.l.mu.Unlock()
	var res struct {
		PartialSuccess struct {
			RejectedSpans string `json:"rejectedSpans"`
			ErrorMessage  string `json:"errorMessage"`
		} `json:"partialSuccess"`
	}
	for attempt := 0; ; attempt++ {
		r := replica + attempt
		ctx, cancel := context.WithTimeout(hard, 10*time.Second)
		start := time.Now()
		code, err := ld.c.do(ctx, r, http.MethodPost, "/v1/traces", body, map[string]string{"X-API-Key": ld.r.key}, &res)
		cancel()
		ld.hist.write(map[string]any{"ev": "op", "op": "otlp_export", "batch": id, "replica": r % 2, "attempt": attempt,
			"status": code, "err": errString(err), "ms": time.Since(start).Milliseconds()})
		ld.l.mu.Lock()
		ld.l.keyPosts++
		if err == nil && code != http.StatusUnauthorized && code != http.StatusServiceUnavailable {
			ld.l.keyAnswered++
		}
		if attempt > 0 {
			// A retry of an export that may have been stored.
			for _, e := range ids {
				ld.l.atLeastOnce[e] = true
			}
		}
		ld.l.mu.Unlock()
		switch {
		case err == nil && code == http.StatusOK:
			ld.l.mu.Lock()
			if res.PartialSuccess.RejectedSpans != "" && res.PartialSuccess.RejectedSpans != "0" {
				ld.l.badIngest = append(ld.l.badIngest, fmt.Sprintf("%s: OTLP rejected %s spans: %s", id, res.PartialSuccess.RejectedSpans, res.PartialSuccess.ErrorMessage))
			} else {
				for _, e := range ids {
					ld.l.acked[e] = true
				}
			}
			ld.l.ops["otlp export: acknowledged"]++
			if attempt > 0 {
				ld.l.ops["otlp export: acknowledged after a retry"]++
			}
			ld.l.mu.Unlock()
			return
		case !retryable(code, err):
			ld.l.mu.Lock()
			ld.l.badIngest = append(ld.l.badIngest, fmt.Sprintf("%s: OTLP %d on replica %d", id, code, r%2))
			ld.l.mu.Unlock()
			return
		}
		ld.l.op("otlp export: " + outcome(code, err))
		select {
		case <-hard.Done():
			ld.l.op("otlp export: given up unacknowledged")
			return
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
}
