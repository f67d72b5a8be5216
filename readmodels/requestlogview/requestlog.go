package requestlogview

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/requestlog"
)

// Limits of the query parameters.
const (
	DefaultHours    = 24
	MaxHours        = 8760
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// ParseHours reads the hours parameter: empty is DefaultHours, else an
// integer 1..MaxHours.
func ParseHours(raw string) (int, error) {
	if raw == "" {
		return DefaultHours, nil
	}
	return parseInt("hours", raw, 1, MaxHours)
}

// ParsePage reads page (default 1) and page_size (default DefaultPageSize,
// at most MaxPageSize).
func ParsePage(page, size string) (int, int, error) {
	p, s := 1, DefaultPageSize
	var errs []error
	var err error
	if page != "" {
		if p, err = parseInt("page", page, 1, 1<<31-1); err != nil {
			errs = append(errs, err)
		}
	}
	if size != "" {
		if s, err = parseInt("page_size", size, 1, MaxPageSize); err != nil {
			errs = append(errs, err)
		}
	}
	return p, s, errcode.Join(errs...)
}

func parseInt(field, raw string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		return 0, errcode.Field(field, fmt.Sprintf("must be an integer from %d to %d", lo, hi))
	}
	return n, nil
}

// ActiveAPIKeys counts the API keys in use; it comes from the API-key read
// model.
type ActiveAPIKeys func(ctx context.Context) (int64, error)

// Store answers the questions.
type Store struct {
	conn       driver.Conn
	now        func() time.Time
	activeKeys ActiveAPIKeys
}

// New returns a store over conn's database. activeKeys may be nil (then
// active_api_keys is 0). A question that meets a replay's swap half done
// is asked again (retry).
func New(conn driver.Conn, now func() time.Time, activeKeys ActiveAPIKeys) *Store {
	return &Store{conn: conn, now: now, activeKeys: activeKeys}
}

// Request is one request log (docs/api.md, ingest): the event as ingested, with the id
// the sink gave it (its fields flatten into the JSON). Its grpc_status_code
// is the canonical name, whatever spelling the row was stored with.
type Request struct {
	ID uint64 `json:"id"`
	requestlog.Event
	// ReportedBy is who posted the row (requestlog.Event.ReportedBy):
	// shown here, never taken from a report.
	ReportedBy string `json:"reported_by"`
}

// Filter narrows the request list; empty fields do not filter.
type Filter struct {
	Service, Method, Status string
	// Code is a gRPC status code in any spelling requestlog.ParseCode
	// takes; it matches rows stored with any of them.
	Code           string
	Page, PageSize int
	// ID, when not nil, is the one request asked for (0 is an id: the
	// first event of partition 0).
	ID *uint64
	// Hours, when not 0, keeps the requests of the last Hours hours, the
	// window of the statistics (whole minutes, the current one included).
	Hours int
	// ExcludeInternal leaves out cfgd's own traffic (InternalServices).
	ExcludeInternal bool
}

// Validate checks f, filling the paging defaults.
func (f *Filter) Validate() error {
	var errs []error
	if f.Status != "" && !requestlog.ValidStatus(f.Status) {
		errs = append(errs, errcode.Field("status", "must be one of "+strings.Join(requestlog.Statuses(), ", ")))
	}
	if f.Code != "" && !requestlog.ValidCode(f.Code) {
		errs = append(errs, errcode.Field("grpc_status_code", "must be a gRPC status code: its name (DEADLINE_EXCEEDED), Go's name (DeadlineExceeded) or its number (4)"))
	}
	if f.Hours < 0 || f.Hours > MaxHours {
		errs = append(errs, errcode.Field("hours", fmt.Sprintf("must be an integer from 1 to %d", MaxHours)))
	}
	if f.Page == 0 {
		f.Page = 1
	}
	if f.PageSize == 0 {
		f.PageSize = DefaultPageSize
	}
	if f.Page < 1 {
		errs = append(errs, errcode.Field("page", "must be at least 1"))
	}
	if f.PageSize < 1 || f.PageSize > MaxPageSize {
		errs = append(errs, errcode.Field("page_size", fmt.Sprintf("must be from 1 to %d", MaxPageSize)))
	}
	return errcode.Join(errs...)
}

// selectRequest reads the columns of a Request, in Scan's order.
const selectRequest = `SELECT id, request_id, service_name, method_name, status, duration_ms, grpc_status_code, error_message,
	created_at, created_ms, client_ip, user_id, username, is_authenticated, api_key_id, api_key_name, reported_by, kafka_partition, kafka_offset`

// Requests returns one page of the requests matching f, newest first, and
// how many match in all.
func (s *Store) Requests(ctx context.Context, f Filter) ([]Request, int64, error) {
	type page struct {
		rows  []Request
		count int64
	}
	p, err := retry(ctx, func() (page, error) {
		rows, count, err := s.requestsAttempt(ctx, f)
		return page{rows, count}, err
	})
	return p.rows, p.count, err
}

func (s *Store) requestsAttempt(ctx context.Context, f Filter) ([]Request, int64, error) {
	if err := f.Validate(); err != nil {
		return nil, 0, err
	}
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"service_name", f.Service}, {"method_name", f.Method}, {"status", f.Status}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if f.Code != "" {
		// Rows written before codes were stored canonically hold Go's
		// name: match every spelling.
		sp := requestlog.CodeSpellings(f.Code)
		where = append(where, "grpc_status_code IN (?"+strings.Repeat(", ?", len(sp)-1)+")")
		for _, v := range sp {
			args = append(args, v)
		}
	}
	if f.ID != nil {
		// By its place in Kafka, not the stored id: rows stored before ids
		// fit in 53 bits hold another id for the same place.
		p, o, i := requestlog.IDParts(*f.ID)
		where = append(where, "kafka_partition = ? AND kafka_offset = ? AND bitAnd(id, "+strconv.FormatUint(requestlog.IDIndexMask, 10)+") = ?")
		args = append(args, uint16(p), uint64(o), uint64(i))
	}
	if f.Hours != 0 {
		where, args = append(where, "created_at >= toDateTime(?)"), append(args, windowStart(s.now(), f.Hours).Unix())
	}
	if f.ExcludeInternal {
		c, a := notInternal()
		where, args = append(where, c), append(args, a...)
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	var count uint64
	if err := s.conn.QueryRow(ctx, "SELECT count() FROM "+RawTable+cond, args...).Scan(&count); err != nil {
		return nil, 0, fmt.Errorf("count requests: %w", err)
	}
	out := []Request{}
	offset := (int64(f.Page) - 1) * int64(f.PageSize)
	if offset >= int64(count) {
		return out, int64(count), nil
	}
	q := selectRequest + " FROM " + RawTable + cond + " ORDER BY created_at DESC, created_ms DESC, id DESC LIMIT " +
		strconv.FormatInt(offset, 10) + ", " + strconv.Itoa(f.PageSize)
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("list requests: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r Request
		var dur uint32
		var ms uint16
		var uid, kid uint64
		var auth uint8
		var partition uint16
		var offset uint64
		if err := rows.Scan(&r.ID, &r.RequestID, &r.ServiceName, &r.MethodName, &r.Status, &dur, &r.GRPCStatusCode, &r.ErrorMessage,
			&r.CreatedAt, &ms, &r.ClientIP, &uid, &r.Username, &auth, &kid, &r.APIKeyName, &r.ReportedBy, &partition, &offset); err != nil {
			return nil, 0, fmt.Errorf("list requests: %w", err)
		}
		r.DurationMS, r.UserID, r.APIKeyID, r.IsAuthenticated = int64(dur), int64(uid), int64(kid), auth == 1
		r.GRPCStatusCode = requestlog.CanonicalCode(r.GRPCStatusCode)
		// Rows stored before ids fit in 53 bits held the partition at
		// bit 52: answer every row with the id its place in Kafka has now.
		r.ID = requestlog.ID(int32(partition), int64(offset), requestlog.IDIndex(r.ID))
		r.CreatedAt = r.CreatedAt.UTC().Add(time.Duration(ms) * time.Millisecond)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("list requests: %w", err)
	}
	return out, int64(count), nil
}
