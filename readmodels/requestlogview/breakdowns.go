package requestlogview

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
)

// Breakdown limits: how many callers one answer lists.
const (
	DefaultBreakdownLimit = 20
	MaxBreakdownLimit     = 100
)

// ParseLimit reads the limit parameter: empty is DefaultBreakdownLimit,
// else an integer 1..MaxBreakdownLimit.
func ParseLimit(raw string) (int, error) {
	if raw == "" {
		return DefaultBreakdownLimit, nil
	}
	return parseInt("limit", raw, 1, MaxBreakdownLimit)
}

// ParseIncludeInternal reads the include_internal parameter: empty is def,
// else true or false.
func ParseIncludeInternal(raw string, def bool) (bool, error) {
	switch raw {
	case "":
		return def, nil
	case "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, errcode.Field("include_internal", "must be true or false")
}

// BreakdownFilter chooses the requests a breakdown counts: those of the
// last Hours hours (the window of the statistics), optionally of one
// Service, with or without cfgd's own traffic. Limit bounds the callers
// listed (0 is DefaultBreakdownLimit).
type BreakdownFilter struct {
	Hours           int
	Service         string
	IncludeInternal bool
	Limit           int
}

// Caller kinds: who a request's reporter says made it, by the ids it put
// in the row (api_key_id, else user_id).
const (
	CallerAPIKey    = "api_key"
	CallerUser      = "user"
	CallerAnonymous = "anonymous"
)

// Caller is one row of /api/grpc/monitor/callers/: the requests one
// reporter posted with one claimed caller. ReportedBy is the reporter
// cfgd authenticated at ingest (requestlog.Event.ReportedBy: api_key:<id>,
// user:<id>, cfgd; ” for rows stored before it was recorded); the Claimed
// fields are what that reporter wrote in the rows (the API key when the
// row names one, else the user, else anonymous), which cfgd cannot check.
// Rows are keyed by both, so a reporter claiming another key's id or a
// made-up name gets a row of its own, never one that looks like the other
// key's.
type Caller struct {
	ReportedBy         string  `json:"reported_by"`
	ClaimedKind        string  `json:"claimed_kind"`
	ClaimedID          int64   `json:"claimed_id"`
	ClaimedName        string  `json:"claimed_name"`
	TotalRequests      int64   `json:"total_requests"`
	SuccessfulRequests int64   `json:"successful_requests"`
	FailedRequests     int64   `json:"failed_requests"`
	SuccessRate        float64 `json:"success_rate"`
	AvgDurationMS      float64 `json:"avg_duration_ms"`
}

// StatusCode is one row of /api/grpc/monitor/status-codes/.
type StatusCode struct {
	Code          string  `json:"grpc_status_code"`
	Requests      int64   `json:"requests"`
	Share         float64 `json:"share"` // percent of the window's requests
	AvgDurationMS float64 `json:"avg_duration_ms"`
}

// rawWindow is the condition on raw rows of f, with its arguments.
func (s *Store) rawWindow(f BreakdownFilter) (string, []any, error) {
	if _, err := parseInt("hours", strconv.Itoa(f.Hours), 1, MaxHours); err != nil {
		return "", nil, err
	}
	now := s.now()
	cond := " WHERE created_at >= toDateTime(?) AND created_at < toDateTime(?)"
	args := []any{windowStart(now, f.Hours).Unix(), windowEnd(now).Unix()}
	if f.Service != "" {
		cond, args = cond+" AND service_name = ?", append(args, f.Service)
	}
	if !f.IncludeInternal {
		c, a := notInternal()
		cond, args = cond+" AND "+c, append(args, a...)
	}
	return cond, args, nil
}

// Callers returns the busiest (reporter, claimed caller) pairs of the
// window, busiest first, at most f.Limit. The rollups keep neither, so
// this reads the raw rows of the window.
func (s *Store) Callers(ctx context.Context, f BreakdownFilter) ([]Caller, error) {
	return retry(ctx, func() ([]Caller, error) { return s.callersAttempt(ctx, f) })
}

func (s *Store) callersAttempt(ctx context.Context, f BreakdownFilter) ([]Caller, error) {
	if f.Limit == 0 {
		f.Limit = DefaultBreakdownLimit
	}
	if _, err := parseInt("limit", strconv.Itoa(f.Limit), 1, MaxBreakdownLimit); err != nil {
		return nil, err
	}
	cond, args, err := s.rawWindow(f)
	if err != nil {
		return nil, err
	}
	// The claimed name is part of the key: one reporter naming the same id
	// two ways gets two rows, not one showing either name.
	q := `SELECT reported_by, multiIf(api_key_id != 0, '` + CallerAPIKey + `', user_id != 0, '` + CallerUser + `', '` + CallerAnonymous + `') AS kind,
	if(api_key_id != 0, api_key_id, user_id) AS cid, multiIf(api_key_id != 0, api_key_name, user_id != 0, username, '') AS cname,
	count() AS total, countIf(status = 'success'), countIf(status IN ('error', 'timeout', 'cancelled')), sum(duration_ms)
	FROM ` + RawTable + cond + ` GROUP BY reported_by, kind, cid, cname
	ORDER BY total DESC, reported_by, kind, cid, cname LIMIT ` + strconv.Itoa(f.Limit)
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("callers: %w", err)
	}
	defer rows.Close()
	out := []Caller{}
	for rows.Next() {
		var c Caller
		var id uint64
		var t totals
		if err := rows.Scan(&c.ReportedBy, &c.ClaimedKind, &id, &c.ClaimedName, &t.total, &t.ok, &t.failed, &t.duration); err != nil {
			return nil, fmt.Errorf("callers: %w", err)
		}
		c.ClaimedID, c.TotalRequests, c.SuccessfulRequests, c.FailedRequests = int64(id), int64(t.total), int64(t.ok), int64(t.failed)
		c.SuccessRate, c.AvgDurationMS = t.rate(), t.avg()
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("callers: %w", err)
	}
	return out, nil
}

// StatusCodes returns the requests of the window per gRPC status code,
// commonest first. Like Callers it reads the raw rows.
func (s *Store) StatusCodes(ctx context.Context, f BreakdownFilter) ([]StatusCode, error) {
	return retry(ctx, func() ([]StatusCode, error) { return s.statusCodesAttempt(ctx, f) })
}

func (s *Store) statusCodesAttempt(ctx context.Context, f BreakdownFilter) ([]StatusCode, error) {
	cond, args, err := s.rawWindow(f)
	if err != nil {
		return nil, err
	}
	q := `SELECT grpc_status_code, count() AS n, sum(duration_ms) FROM ` + RawTable + cond +
		` GROUP BY grpc_status_code ORDER BY n DESC, grpc_status_code`
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("status codes: %w", err)
	}
	defer rows.Close()
	// Rows stored before codes were stored canonically hold Go's names:
	// each spelling's group joins its code's.
	byCode := map[string]*totals{}
	var order []string
	var all int64
	for rows.Next() {
		var code string
		var t totals
		if err := rows.Scan(&code, &t.total, &t.duration); err != nil {
			return nil, fmt.Errorf("status codes: %w", err)
		}
		code = requestlog.CanonicalCode(code)
		if byCode[code] == nil {
			byCode[code] = &totals{}
			order = append(order, code)
		}
		byCode[code].total += t.total
		byCode[code].duration += t.duration
		all += int64(t.total)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("status codes: %w", err)
	}
	out := make([]StatusCode, 0, len(order))
	for _, code := range order {
		t := byCode[code]
		out = append(out, StatusCode{Code: code, Requests: int64(t.total), AvgDurationMS: t.avg(), Share: float64(t.total) / float64(all) * 100})
	}
	slices.SortStableFunc(out, func(a, b StatusCode) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Code, b.Code))
	})
	return out, nil
}
