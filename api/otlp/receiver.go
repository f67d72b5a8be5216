package otlp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlog/ingestmetrics"
)

// Accepter is the request log's accept path, the one the JSON ingest
// takes: it validates events, hands the valid ones to the request-log
// topic and returns the problems of the others (FieldError.Index is the
// position in events). Its error wraps requestlog.ErrUnavailable when the
// topic cannot take them.
type Accepter interface {
	Accept(ctx context.Context, events []requestlog.Event) ([]requestlog.FieldError, error)
}

// Producer takes validated events to the request-log topic
// (*requestlogkafka.Producer).
type Producer interface {
	Produce(ctx context.Context, events []requestlog.Event) error
}

// ViaIngest is the Accepter of the JSON ingest's one path
// (requestlog.Accepter): the same validation, created_at window and
// producer. A batch of which every span was refused is a partial_success
// with every span rejected, not an error, in OTLP.
type ViaIngest struct {
	Ingest *requestlog.Accepter
}

// Accept implements Accepter.
func (v ViaIngest) Accept(ctx context.Context, events []requestlog.Event) ([]requestlog.FieldError, error) {
	out, err := v.Ingest.Accept(ctx, events, nil)
	var refusal *errcode.Error
	if err != nil && errors.As(err, &refusal) && refusal.Code == errcode.Invalid {
		return out.Errors, nil
	}
	return out.Errors, err
}

// reporter is the reported_by of what p exports: its API key, or its
// (staff) user.
func reporter(p grpcserver.Principal) string {
	if p.Via == grpcserver.ViaAPIKey {
		return requestlog.ReportedByKey(p.KeyID)
	}
	return requestlog.ReportedByUser(p.UserID)
}

// Keys checks an API key (grpcserver.SigninAuthenticator): the HTTP side
// authenticates here, the gRPC side in the server's interceptor, so a key
// is accepted or refused the same way on both.
type Keys interface {
	APIKey(ctx context.Context, raw string) (grpcserver.Principal, error)
}

// maxReasons bounds the rejections partial_success names, so its message
// stays short whatever the batch.
const maxReasons = 5

// Receiver serves OTLP trace exports on both transports.
type Receiver struct {
	accept Accepter
	keys   Keys
	log    *slog.Logger
	// metrics counts rejected spans (the producer counts the rest).
	metrics *ingestmetrics.Metrics
}

// New returns the receiver over accept, authenticating HTTP callers with
// keys.
func New(accept Accepter, keys Keys, log *slog.Logger) *Receiver {
	return &Receiver{accept: accept, keys: keys, log: log}
}

// allowed is the ingest's rule: an API key, or a staff user (gRPC Bearer).
func allowed(p grpcserver.Principal) error {
	if p.Via != grpcserver.ViaAPIKey && !p.Staff {
		return errcode.New(errcode.Forbidden, "an API key (x-api-key) is required")
	}
	return nil
}

// export records the gRPC server spans of td. A span that is no request
// (CLIENT, not gRPC) is ignored; a gRPC server span that cannot be
// mapped, or whose event fails validation, is rejected and counted in
// partial_success with the first reasons. The whole export fails only
// when it is too large or the request log cannot take it (retryable).
func (r *Receiver) export(ctx context.Context, p grpcserver.Principal, td ptrace.Traces) (ptraceotlp.ExportResponse, error) {
	var (
		events  []requestlog.Event
		spans   []ptrace.Span // spans[i] made events[i]
		reasons []string
		reject  int
	)
	note := func(span ptrace.Span, why string) {
		reject++
		if len(reasons) < maxReasons {
			reasons = append(reasons, fmt.Sprintf("span %s (%s): %s", span.SpanID(), trunc(span.Name()), why))
		}
	}
	rss := td.ResourceSpans()
	for i := range rss.Len() {
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			ss := sss.At(j).Spans()
			for k := range ss.Len() {
				span := ss.At(k)
				e, err := FromSpan(span)
				switch {
				case errors.Is(err, errNotRequest):
				case err != nil:
					note(span, err.Error())
				default:
					events, spans = append(events, e), append(spans, span)
				}
			}
		}
	}
	// Who posted is the one field of a report cfgd checked itself.
	problems, err := r.accept.Accept(ctx, requestlog.ReportedAs(events, reporter(p)))
	if err != nil {
		return ptraceotlp.ExportResponse{}, r.failed(ctx, err)
	}
	// One event may have several problems; it is one rejected span.
	why := map[int][]string{}
	var order []int
	for _, p := range problems {
		if p.Index < 0 || p.Index >= len(spans) {
			continue
		}
		if _, seen := why[p.Index]; !seen {
			order = append(order, p.Index)
		}
		why[p.Index] = append(why[p.Index], p.Field+": "+p.Message)
	}
	for _, i := range order {
		note(spans[i], strings.Join(why[i], "; "))
	}
	r.metrics.Rejected(ingestmetrics.OTLP, ingestmetrics.Invalid, reject)
	res := ptraceotlp.NewExportResponse()
	if reject > 0 {
		ps := res.PartialSuccess()
		ps.SetRejectedSpans(int64(reject))
		ps.SetErrorMessage(fmt.Sprintf("%d spans rejected: %s", reject, strings.Join(reasons, "; ")))
	}
	return res, nil
}

// failed is the answer to an accept path that failed: a full topic is
// retryable (OTLP clients retry UNAVAILABLE and HTTP 503), a caller who
// left is his own business, anything else is cfgd's (logged by the
// transport).
func (r *Receiver) failed(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, requestlog.ErrUnavailable):
		return &errcode.Error{Code: errcode.Unavailable, Message: "the request-log queue is unavailable, retry shortly", RetryAfter: time.Second, Err: err}
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		return fmt.Errorf("otlp export: %w", err)
	}
}
