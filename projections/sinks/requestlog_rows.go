package sinks

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// RequestLogRows are events in column order, ready for one columnar insert (much
// cheaper for clickhouse-go than appending row by row). The benchmark's
// direct-insert baseline uses them too, so both paths insert alike.
type RequestLogRows struct {
	id                []uint64
	partition         []uint16
	offset            []uint64
	createdAt         []time.Time
	createdMS         []uint16
	requestID         []string
	service, method   []string
	status, code      []string
	duration          []uint32
	errorMessage      []string
	clientIP          []string
	userID, apiKeyID  []uint64
	username, keyName []string
	authenticated     []uint8
	reportedBy        []string
}

// RequestLogColumns is the explicit column list of the insert (ClickHouse 18.16
// takes native inserts only with one).
const RequestLogColumns = "id, kafka_partition, kafka_offset, created_at, created_ms, request_id, service_name, method_name, status, grpc_status_code, duration_ms, error_message, client_ip, user_id, api_key_id, username, api_key_name, is_authenticated, reported_by"

// Len is the number of rows.
func (r *RequestLogRows) Len() int { return len(r.id) }

// Grow makes room for n more rows, so that filling a batch of a size
// known beforehand (the sink's batch of weighed records, a replay's
// block) copies no column: growing nineteen columns by doubling took 15%
// of a replay's CPU (docs/benchmarks.md).
func (r *RequestLogRows) Grow(n int) {
	r.id = slices.Grow(r.id, n)
	r.partition = slices.Grow(r.partition, n)
	r.offset = slices.Grow(r.offset, n)
	r.createdAt = slices.Grow(r.createdAt, n)
	r.createdMS = slices.Grow(r.createdMS, n)
	r.requestID = slices.Grow(r.requestID, n)
	r.service = slices.Grow(r.service, n)
	r.method = slices.Grow(r.method, n)
	r.status = slices.Grow(r.status, n)
	r.code = slices.Grow(r.code, n)
	r.duration = slices.Grow(r.duration, n)
	r.errorMessage = slices.Grow(r.errorMessage, n)
	r.clientIP = slices.Grow(r.clientIP, n)
	r.userID = slices.Grow(r.userID, n)
	r.apiKeyID = slices.Grow(r.apiKeyID, n)
	r.username = slices.Grow(r.username, n)
	r.keyName = slices.Grow(r.keyName, n)
	r.authenticated = slices.Grow(r.authenticated, n)
	r.reportedBy = slices.Grow(r.reportedBy, n)
}

// truncate empties r, keeping the room of its columns.
func (r *RequestLogRows) truncate() {
	r.id, r.partition, r.offset = r.id[:0], r.partition[:0], r.offset[:0]
	r.createdAt, r.createdMS, r.requestID = r.createdAt[:0], r.createdMS[:0], r.requestID[:0]
	r.service, r.method, r.status, r.code = r.service[:0], r.method[:0], r.status[:0], r.code[:0]
	r.duration, r.errorMessage, r.clientIP = r.duration[:0], r.errorMessage[:0], r.clientIP[:0]
	r.userID, r.apiKeyID, r.username, r.keyName = r.userID[:0], r.apiKeyID[:0], r.username[:0], r.keyName[:0]
	r.authenticated, r.reportedBy = r.authenticated[:0], r.reportedBy[:0]
}

// Add appends the index-th event of the record at offset of partition.
func (r *RequestLogRows) Add(partition int32, offset int64, index int, e *requestlog.Event) {
	r.id = append(r.id, RequestLogID(partition, offset, index))
	r.partition = append(r.partition, uint16(partition))
	r.offset = append(r.offset, uint64(offset))
	r.createdAt = append(r.createdAt, e.CreatedAt.Truncate(time.Second))
	r.createdMS = append(r.createdMS, uint16(e.CreatedAt.Nanosecond()/int(time.Millisecond)))
	r.requestID = append(r.requestID, e.RequestID)
	r.service = append(r.service, e.ServiceName)
	r.method = append(r.method, e.MethodName)
	r.status = append(r.status, e.Status)
	r.code = append(r.code, e.GRPCStatusCode)
	r.duration = append(r.duration, uint32(e.DurationMS))
	r.errorMessage = append(r.errorMessage, e.ErrorMessage)
	r.clientIP = append(r.clientIP, e.ClientIP)
	r.userID = append(r.userID, uint64(e.UserID))
	r.apiKeyID = append(r.apiKeyID, uint64(e.APIKeyID))
	r.username = append(r.username, e.Username)
	r.keyName = append(r.keyName, e.APIKeyName)
	var a uint8
	if e.IsAuthenticated {
		a = 1
	}
	r.authenticated = append(r.authenticated, a)
	r.reportedBy = append(r.reportedBy, e.ReportedBy)
}

// rebase adds base[partition] to the offsets of the rows, and gives them
// the ids of their new offsets: the records of a topic created again are
// stored after the old topic's.
func (r *RequestLogRows) rebase(base map[int32]int64) {
	if len(base) == 0 {
		return
	}
	for i := range r.id {
		p := int32(r.partition[i])
		if b := base[p]; b != 0 {
			r.offset[i] += uint64(b)
			r.id[i] = RequestLogID(p, int64(r.offset[i]), int(r.id[i]&(1<<12-1)))
		}
	}
}

// without returns the rows whose offset is above what the raw table holds
// of their partition (held[partition][0]).
func (r *RequestLogRows) without(held map[int32][4]int64) RequestLogRows {
	skip := false
	for i := range r.id {
		if int64(r.offset[i]) <= held[int32(r.partition[i])][0] {
			skip = true
			break
		}
	}
	if !skip {
		// Nothing held, the usual case: no copy (it took a tenth of the
		// sink's CPU).
		return *r
	}
	var out RequestLogRows
	for i := range r.id {
		if int64(r.offset[i]) <= held[int32(r.partition[i])][0] {
			continue
		}
		out.id = append(out.id, r.id[i])
		out.partition = append(out.partition, r.partition[i])
		out.offset = append(out.offset, r.offset[i])
		out.createdAt = append(out.createdAt, r.createdAt[i])
		out.createdMS = append(out.createdMS, r.createdMS[i])
		out.requestID = append(out.requestID, r.requestID[i])
		out.service = append(out.service, r.service[i])
		out.method = append(out.method, r.method[i])
		out.status = append(out.status, r.status[i])
		out.code = append(out.code, r.code[i])
		out.duration = append(out.duration, r.duration[i])
		out.errorMessage = append(out.errorMessage, r.errorMessage[i])
		out.clientIP = append(out.clientIP, r.clientIP[i])
		out.userID = append(out.userID, r.userID[i])
		out.apiKeyID = append(out.apiKeyID, r.apiKeyID[i])
		out.username = append(out.username, r.username[i])
		out.keyName = append(out.keyName, r.keyName[i])
		out.authenticated = append(out.authenticated, r.authenticated[i])
		out.reportedBy = append(out.reportedBy, r.reportedBy[i])
	}
	return out
}

// Insert writes the rows in one INSERT into the raw table of conn's
// database.
func (r *RequestLogRows) Insert(ctx context.Context, conn driver.Conn) error {
	return r.InsertInto(ctx, conn, requestlogview.RawTable)
}

// InsertInto writes the rows in one INSERT into table (a raw table: the
// live one or a replay's shadow).
func (r *RequestLogRows) InsertInto(ctx context.Context, conn driver.Conn, table string) error {
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+RequestLogColumns+")")
	if err != nil {
		return fmt.Errorf("prepare insert: %w", err)
	}
	cols := []any{r.id, r.partition, r.offset, r.createdAt, r.createdMS, r.requestID, r.service, r.method, r.status, r.code,
		r.duration, r.errorMessage, r.clientIP, r.userID, r.apiKeyID, r.username, r.keyName, r.authenticated, r.reportedBy}
	for i, c := range cols {
		if err := b.Column(i).Append(c); err != nil {
			_ = b.Abort()
			return fmt.Errorf("insert column %d: %w", i, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %d rows: %w", r.Len(), err)
	}
	return nil
}
