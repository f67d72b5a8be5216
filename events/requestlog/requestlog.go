// Package requestlog is the gRPC request-log record of docs/api.md#request-log
// as it travels from the edges (HTTP ingest, and later cfgd's own gRPC
// interceptor and the cfgd.ingest.v1 service) to the ClickHouse sink: the
// event, its validation, and the compact wire format that packs many events
// into one Kafka message. It knows nothing of transports.
package requestlog

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cfgd/cfgd/deploy/clip"
)

// Statuses of a request (docs/api.md#request-log).
const (
	StatusSuccess   = "success"
	StatusError     = "error"
	StatusTimeout   = "timeout"
	StatusPending   = "pending"
	StatusCancelled = "cancelled"
)

// Statuses lists every status, in a stable order.
var statuses = [...]string{StatusSuccess, StatusError, StatusTimeout, StatusPending, StatusCancelled}

// Statuses returns every valid status.
func Statuses() []string { return statuses[:] }

// ValidStatus reports whether s is one of the five statuses.
func ValidStatus(s string) bool {
	for _, v := range statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Event is one request-log record. ID is not here: the sink derives it
// from where the event sits in Kafka, so it is the same after a replay.
type Event struct {
	RequestID       string    `json:"request_id"`
	ServiceName     string    `json:"service_name"`
	MethodName      string    `json:"method_name"`
	Status          string    `json:"status"`
	DurationMS      int64     `json:"duration_ms"`
	GRPCStatusCode  string    `json:"grpc_status_code"`
	ErrorMessage    string    `json:"error_message"`
	CreatedAt       time.Time `json:"created_at"`
	ClientIP        string    `json:"client_ip"`
	UserID          int64     `json:"user_id"`
	Username        string    `json:"username"`
	IsAuthenticated bool      `json:"is_authenticated"`
	APIKeyID        int64     `json:"api_key_id"`
	APIKeyName      string    `json:"api_key_name"`
	// ReportedBy is who sent the event to cfgd, set by the server at
	// ingest and never taken from the report (ReportedByKey,
	// ReportedByUser, ReportedBySelf). Everything above is what the
	// reporter says; only this is a fact cfgd checked.
	ReportedBy string `json:"-"`
}

// ReportedBySelf marks the events of cfgd's own gRPC calls.
const ReportedBySelf = "cfgd"

// ReportedByKey is ReportedBy for a report posted with API key id.
func ReportedByKey(id int64) string { return "api_key:" + strconv.FormatInt(id, 10) }

// ReportedByUser is ReportedBy for a report posted by (staff) user id.
func ReportedByUser(id int64) string { return "user:" + strconv.FormatInt(id, 10) }

// ReportedAs returns events with ReportedBy set to by, in place.
func ReportedAs(events []Event, by string) []Event {
	for i := range events {
		events[i].ReportedBy = by
	}
	return events
}

// Limits of the string fields, in bytes. They bound what one event can
// cost downstream; a real gRPC name is far shorter.
const (
	MaxRequestID    = 128
	MaxServiceName  = 256
	MaxMethodName   = 256
	MaxErrorMessage = 4096
	MaxClientIP     = 64
	MaxUsername     = 256
	MaxAPIKeyName   = 256
	// MaxDurationMS is a week: anything longer is a clock error.
	MaxDurationMS = int64(7 * 24 * time.Hour / time.Millisecond)
)

// FieldError is one problem with one event of a batch.
type FieldError struct {
	Index   int    `json:"index"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e FieldError) Error() string {
	return fmt.Sprintf("events[%d].%s: %s", e.Index, e.Field, e.Message)
}

// Normalize fills what an edge may leave out: the status from the gRPC
// code (or the code from the status), and the time the request was
// reported when it has none. It returns the event, changed.
func Normalize(e Event, now time.Time) Event {
	if c, ok := ParseCode(e.GRPCStatusCode); ok {
		// One spelling is stored, so filters and answers see one.
		e.GRPCStatusCode = c
	}
	if e.Status == "" && e.GRPCStatusCode != "" {
		e.Status = StatusFromCode(e.GRPCStatusCode)
	}
	if e.GRPCStatusCode == "" && e.Status == StatusSuccess {
		e.GRPCStatusCode = "OK"
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = now
	}
	e.CreatedAt = e.CreatedAt.UTC()
	return e
}

// Check returns every problem of event e at index i of its batch.
func Check(i int, e Event) []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Index: i, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	str := func(field, v string, max int, required bool) {
		switch {
		case required && strings.TrimSpace(v) == "":
			add(field, "is required")
		case len(v) > max:
			add(field, "is longer than %d bytes", max)
		case !utf8.ValidString(v):
			add(field, "is not valid UTF-8")
		}
	}
	str("request_id", e.RequestID, MaxRequestID, false)
	str("service_name", e.ServiceName, MaxServiceName, true)
	str("method_name", e.MethodName, MaxMethodName, true)
	str("error_message", e.ErrorMessage, MaxErrorMessage, false)
	str("username", e.Username, MaxUsername, false)
	str("api_key_name", e.APIKeyName, MaxAPIKeyName, false)
	switch {
	case e.Status == "":
		add("status", "is required (or give grpc_status_code); one of %s", strings.Join(statuses[:], ", "))
	case !ValidStatus(e.Status):
		add("status", "unknown status %q; one of %s", trunc(e.Status), strings.Join(statuses[:], ", "))
	}
	if e.GRPCStatusCode != "" && !ValidCode(e.GRPCStatusCode) {
		add("grpc_status_code", "unknown gRPC status code %q; give %s", trunc(e.GRPCStatusCode), codeHint)
	}
	switch {
	case e.DurationMS < 0:
		add("duration_ms", "must not be negative")
	case e.DurationMS > MaxDurationMS:
		add("duration_ms", "must be at most %d (a week)", MaxDurationMS)
	}
	// Answers carry these as JSON numbers, which hold integers exactly
	// only up to 2^53-1.
	switch {
	case e.UserID < 0:
		add("user_id", "must not be negative")
	case e.UserID > MaxJSONInt:
		add("user_id", "must be at most %d", MaxJSONInt)
	}
	switch {
	case e.APIKeyID < 0:
		add("api_key_id", "must not be negative")
	case e.APIKeyID > MaxJSONInt:
		add("api_key_id", "must be at most %d", MaxJSONInt)
	}
	if e.ClientIP != "" {
		if len(e.ClientIP) > MaxClientIP {
			add("client_ip", "is longer than %d bytes", MaxClientIP)
		} else if _, err := netip.ParseAddr(e.ClientIP); err != nil {
			add("client_ip", "is not an IP address")
		}
	}
	if y := e.CreatedAt.Year(); !e.CreatedAt.IsZero() && (y < 1971 || y > 2105) {
		// ClickHouse's DateTime holds 1970..2105.
		add("created_at", "must be between 1971 and 2105")
	}
	return errs
}

// MaxJSONInt is the largest integer a JSON answer carries exactly
// (2^53-1: JavaScript's Number.MAX_SAFE_INTEGER).
const MaxJSONInt = 1<<53 - 1

// Window is how far from now an edge takes an event's created_at: rows
// older than the retention are dropped by the sink anyway (and each old
// month costs ClickHouse a partition), and a clock far ahead is an error.
type Window struct {
	MaxAge   time.Duration
	MaxAhead time.Duration
}

// DefaultMaxAhead is the clock skew an edge tolerates.
const DefaultMaxAhead = 5 * time.Minute

// WindowFor is the window of a retention of days.
func WindowFor(retentionDays int) Window {
	return Window{MaxAge: time.Duration(retentionDays) * 24 * time.Hour, MaxAhead: DefaultMaxAhead}
}

// CheckTime returns the problem of event e at index i when its created_at
// is outside w around now.
func CheckTime(i int, e Event, now time.Time, w Window) []FieldError {
	switch {
	case w.MaxAge > 0 && e.CreatedAt.Before(now.Add(-w.MaxAge)):
		return []FieldError{{Index: i, Field: "created_at", Message: fmt.Sprintf("is older than the retention (%s)", w.MaxAge)}}
	case w.MaxAhead > 0 && e.CreatedAt.After(now.Add(w.MaxAhead)):
		return []FieldError{{Index: i, Field: "created_at", Message: fmt.Sprintf("is more than %s ahead of the server's clock", w.MaxAhead)}}
	}
	return nil
}

// Validate normalizes every event of batch and splits it into the valid
// ones, in order, and the problems of the rest (Check, and CheckTime
// against w).
func Validate(batch []Event, now time.Time, w Window) ([]Event, []FieldError) {
	valid, _, problems := validate(batch, nil, now, w)
	return valid, problems
}

// validate is Validate skipping the events whose index skip holds.
// It also returns the index in batch of each valid event.
func validate(batch []Event, skip map[int]bool, now time.Time, w Window) ([]Event, []int, []FieldError) {
	accepted := make([]Event, 0, len(batch))
	at := make([]int, 0, len(batch))
	var problems []FieldError
	for i, e := range batch {
		if skip[i] {
			continue
		}
		e = Normalize(e, now)
		errs := Check(i, e)
		if len(errs) == 0 {
			errs = CheckTime(i, e, now, w)
		}
		if len(errs) > 0 {
			problems = append(problems, errs...)
			continue
		}
		accepted = append(accepted, e)
		at = append(at, i)
	}
	return accepted, at, problems
}

func trunc(s string) string { return clip.Abbrev(s, 32) }
