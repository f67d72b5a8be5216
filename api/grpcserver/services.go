package grpcserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/status"

	apikeysv1 "github.com/cfgd/cfgd/api/protos/cfgd/apikeys/v1"
	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
)

// APIKeys serves cfgd.apikeys.v1 from the read model; callers must be
// staff, as on the REST endpoints (/api/grpc/api-keys/).
type APIKeys struct {
	apikeysv1.UnimplementedAPIKeyServiceServer
	keys *apikeyview.Keys
	log  *slog.Logger
}

// NewAPIKeys returns the service.
func NewAPIKeys(keys *apikeyview.Keys, log *slog.Logger) *APIKeys {
	return &APIKeys{keys: keys, log: log}
}

// List implements APIKeyService.List.
func (s *APIKeys) List(ctx context.Context, req *apikeysv1.ListRequest) (*apikeysv1.ListResponse, error) {
	if err := RequireStaff(ctx); err != nil {
		return nil, err
	}
	page, size := int(req.GetPage()), int(req.GetPageSize())
	if page == 0 {
		page = 1
	}
	if size == 0 {
		size = apikeyview.DefaultPageSize
	}
	if page < 1 || size < 1 || size > apikeyview.MaxPageSize {
		return nil, errcode.New(errcode.BadRequest, fmt.Sprintf("page must be at least 1 and page_size from 1 to %d", apikeyview.MaxPageSize))
	}
	f := apikeyview.Filter{IsActive: req.IsActive, UserID: req.UserId, KeyType: req.GetKeyType()}
	if f.KeyType != "" && !apikey.ValidType(f.KeyType) {
		return nil, errcode.Field("key_type", "must be one of service, cli, webhook, internal, development")
	}
	keys, count, err := s.keys.List(ctx, f, apikeyview.Page{Number: page, Size: size})
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	out := &apikeysv1.ListResponse{Count: count, Results: make([]*apikeysv1.APIKey, 0, len(keys))}
	for _, k := range keys {
		out.Results = append(out.Results, toProto(k))
	}
	return out, nil
}

// Get implements APIKeyService.Get.
func (s *APIKeys) Get(ctx context.Context, req *apikeysv1.GetRequest) (*apikeysv1.APIKey, error) {
	if err := RequireStaff(ctx); err != nil {
		return nil, err
	}
	k, err := s.keys.Get(ctx, req.GetId())
	if errors.Is(err, apikeyview.ErrNotFound) {
		return nil, errcode.New(errcode.NotFound, "API key not found")
	}
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	return toProto(k), nil
}

// Stats implements APIKeyService.Stats.
func (s *APIKeys) Stats(ctx context.Context, _ *apikeysv1.StatsRequest) (*apikeysv1.StatsResponse, error) {
	if err := RequireStaff(ctx); err != nil {
		return nil, err
	}
	st, err := s.keys.Stats(ctx)
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	return &apikeysv1.StatsResponse{
		TotalKeys: st.TotalKeys, ActiveKeys: st.ActiveKeys, ExpiredKeys: st.ExpiredKeys,
		TotalRequests: st.TotalRequests, KeysByType: st.KeysByType,
	}, nil
}

func toProto(k apikeyview.Key) *apikeysv1.APIKey {
	ts := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	return &apikeysv1.APIKey{
		Id: k.ID, Name: k.Name, KeyType: k.KeyType, MaskedKey: k.MaskedKey, IsActive: k.IsActive, IsValid: k.IsValid,
		UserId: k.UserID, Username: k.Username, UserEmail: k.UserEmail, RequestCount: k.RequestCount,
		LastUsedAt: ts(k.LastUsedAt), ExpiresAt: ts(k.ExpiresAt), CreatedAt: ts(&k.CreatedAt), CreatedBy: k.CreatedBy,
	}
}

// unavailable logs a read-model failure and hides its text from the
// caller, who may retry.
func (s *APIKeys) unavailable(ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return errcode.Wrap(errcode.Unavailable, "the read model is unavailable, try again shortly", fmt.Errorf("api key read model: %w", err))
}

// Monitor serves cfgd.monitor.v1: health from the live server, and the
// request-log statistics (staff only) from the read model.
type Monitor struct {
	monitorv1.UnimplementedMonitorServiceServer
	status  func() Status
	queries RequestLogQueries
	log     *slog.Logger
}

// NewMonitor returns the service; status is usually (*Server).Status.
func NewMonitor(status func() Status) *Monitor { return &Monitor{status: status} }

// Health implements MonitorService.Health.
func (m *Monitor) Health(context.Context, *monitorv1.HealthRequest) (*monitorv1.HealthResponse, error) {
	st := m.status()
	out := &monitorv1.HealthResponse{
		Status: "stopped", ServerRunning: st.Running, UptimeSeconds: int64(st.Uptime / time.Second), RegisteredServices: int32(st.Services),
	}
	if st.Running {
		out.Status = "healthy"
	}
	return out, nil
}
