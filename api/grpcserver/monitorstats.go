package grpcserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// RequestLogQueries are the request-log read-model questions the monitor
// service asks (readmodels/requestlogview.Store).
type RequestLogQueries interface {
	Requests(ctx context.Context, f requestlogview.Filter) ([]requestlogview.Request, int64, error)
	Overview(ctx context.Context, hours int) (requestlogview.Overview, error)
	Services(ctx context.Context, hours int) ([]requestlogview.Service, error)
	Methods(ctx context.Context, hours int, service string) ([]requestlogview.Method, error)
}

// WithQueries adds the request-log statistics to m; without them those
// methods answer Unimplemented.
func (m *Monitor) WithQueries(q RequestLogQueries, log *slog.Logger) *Monitor {
	m.queries, m.log = q, log
	return m
}

func (m *Monitor) ready(ctx context.Context) error {
	if m.queries == nil {
		return errcode.New(errcode.NotImplemented, "the request log is not configured on this server")
	}
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return errcode.New(errcode.NotAuthenticated, "not authenticated")
	}
	if !p.Staff {
		return errcode.New(errcode.Forbidden, "staff only")
	}
	return nil
}

// hours applies the REST default (24) to an unset value; the read model
// checks the bounds.
func hours(h int32) int {
	if h == 0 {
		return requestlogview.DefaultHours
	}
	return int(h)
}

// fail hides a read-model failure (logged) behind Unavailable; bad
// parameters, field errors from the read model, pass as they are.
func (m *Monitor) fail(err error) error {
	var e *errcode.Error
	if errors.As(err, &e) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return errcode.Wrap(errcode.Unavailable, "the request log is unavailable, try again shortly", fmt.Errorf("request-log read model: %w", err))
}

// Requests implements MonitorService.Requests.
func (m *Monitor) Requests(ctx context.Context, req *monitorv1.RequestsRequest) (*monitorv1.RequestsResponse, error) {
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	rs, count, err := m.queries.Requests(ctx, requestlogview.Filter{
		Service: req.GetService(), Method: req.GetMethod(), Status: req.GetStatus(), Page: int(req.GetPage()), PageSize: int(req.GetPageSize()),
	})
	if err != nil {
		return nil, m.fail(err)
	}
	out := &monitorv1.RequestsResponse{Count: count, Results: make([]*monitorv1.Request, 0, len(rs))}
	for _, r := range rs {
		out.Results = append(out.Results, &monitorv1.Request{
			Id: r.ID, RequestId: r.RequestID, ServiceName: r.ServiceName, MethodName: r.MethodName, Status: r.Status,
			DurationMs: r.DurationMS, GrpcStatusCode: r.GRPCStatusCode, ErrorMessage: r.ErrorMessage,
			CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano), ClientIp: r.ClientIP, UserId: r.UserID, Username: r.Username,
			IsAuthenticated: r.IsAuthenticated, ApiKeyId: r.APIKeyID, ApiKeyName: r.APIKeyName, ReportedBy: r.ReportedBy,
		})
	}
	return out, nil
}

// Overview implements MonitorService.Overview.
func (m *Monitor) Overview(ctx context.Context, req *monitorv1.OverviewRequest) (*monitorv1.OverviewResponse, error) {
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	o, err := m.queries.Overview(ctx, hours(req.GetHours()))
	if err != nil {
		return nil, m.fail(err)
	}
	return &monitorv1.OverviewResponse{
		TotalRequests: o.TotalRequests, SuccessfulRequests: o.SuccessfulRequests, FailedRequests: o.FailedRequests,
		SuccessRate: o.SuccessRate, AvgDurationMs: o.AvgDurationMS, TotalServices: o.TotalServices, ActiveApiKeys: o.ActiveAPIKeys,
	}, nil
}

// Services implements MonitorService.Services.
func (m *Monitor) Services(ctx context.Context, req *monitorv1.ServicesRequest) (*monitorv1.ServicesResponse, error) {
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	ss, err := m.queries.Services(ctx, hours(req.GetHours()))
	if err != nil {
		return nil, m.fail(err)
	}
	out := &monitorv1.ServicesResponse{Services: make([]*monitorv1.ServiceStats, 0, len(ss))}
	for _, s := range ss {
		out.Services = append(out.Services, &monitorv1.ServiceStats{
			ServiceName: s.ServiceName, TotalRequests: s.TotalRequests, SuccessfulRequests: s.SuccessfulRequests,
			FailedRequests: s.FailedRequests, SuccessRate: s.SuccessRate, AvgDurationMs: s.AvgDurationMS,
			MethodsCount: s.MethodsCount, P95DurationMs: s.P95DurationMS,
		})
	}
	return out, nil
}

// Methods implements MonitorService.Methods.
func (m *Monitor) Methods(ctx context.Context, req *monitorv1.MethodsRequest) (*monitorv1.MethodsResponse, error) {
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	ms, err := m.queries.Methods(ctx, hours(req.GetHours()), req.GetService())
	if err != nil {
		return nil, m.fail(err)
	}
	out := &monitorv1.MethodsResponse{Methods: make([]*monitorv1.MethodStats, 0, len(ms))}
	for _, x := range ms {
		out.Methods = append(out.Methods, &monitorv1.MethodStats{
			ServiceName: x.ServiceName, MethodName: x.MethodName, TotalRequests: x.TotalRequests,
			SuccessfulRequests: x.SuccessfulRequests, FailedRequests: x.FailedRequests, SuccessRate: x.SuccessRate,
			AvgDurationMs: x.AvgDurationMS, MinDurationMs: x.MinDurationMS, MaxDurationMs: x.MaxDurationMS, P95DurationMs: x.P95DurationMS,
		})
	}
	return out, nil
}
