package requestlog

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Wire format of one Kafka message: a version byte, then a protobuf
// message `Batch { repeated Event events = 1; }` whose Event numbers its
// fields as below. Protobuf keeps the format readable by any language and
// lets fields be added; many events per message let LZ4 and Kafka work on
// large records instead of paying per-record overhead (measured in
// codec_test.go's benchmarks).
const formatV1 byte = 1

// BatchFormat names the record format of the request-log topic, and
// BatchVersion is the version this build writes (the first byte of each
// record, and its events.HeaderSchemaVersion).
const (
	BatchFormat  = "requestlog.batch"
	BatchVersion = int(formatV1)
)

const (
	fRequestID protowire.Number = iota + 1
	fServiceName
	fMethodName
	fStatus
	fDurationMS
	fGRPCStatusCode
	fErrorMessage
	fCreatedAtMicros
	fClientIP
	fUserID
	fUsername
	fIsAuthenticated
	fAPIKeyID
	fAPIKeyName
	fReportedBy
)

const fEvents protowire.Number = 1

// ErrFormat marks a message that is not a request-log batch.
var ErrFormat = errors.New("requestlog: not a request-log batch")

// AppendBatch appends the encoding of events to dst.
func AppendBatch(dst []byte, events []Event) []byte {
	dst = append(dst, formatV1)
	var rec []byte
	for i := range events {
		rec = appendEvent(rec[:0], &events[i])
		dst = protowire.AppendTag(dst, fEvents, protowire.BytesType)
		dst = protowire.AppendBytes(dst, rec)
	}
	return dst
}

func appendEvent(b []byte, e *Event) []byte {
	str := func(n protowire.Number, s string) {
		if s != "" {
			b = protowire.AppendTag(b, n, protowire.BytesType)
			b = protowire.AppendString(b, s)
		}
	}
	num := func(n protowire.Number, v uint64) {
		if v != 0 {
			b = protowire.AppendTag(b, n, protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		}
	}
	str(fRequestID, e.RequestID)
	str(fServiceName, e.ServiceName)
	str(fMethodName, e.MethodName)
	str(fStatus, e.Status)
	num(fDurationMS, uint64(e.DurationMS))
	str(fGRPCStatusCode, e.GRPCStatusCode)
	str(fErrorMessage, e.ErrorMessage)
	num(fCreatedAtMicros, uint64(e.CreatedAt.UnixMicro()))
	str(fClientIP, e.ClientIP)
	num(fUserID, uint64(e.UserID))
	str(fUsername, e.Username)
	num(fIsAuthenticated, protowire.EncodeBool(e.IsAuthenticated))
	num(fAPIKeyID, uint64(e.APIKeyID))
	str(fAPIKeyName, e.APIKeyName)
	str(fReportedBy, e.ReportedBy)
	return b
}

// CountBatch returns how many events b packs without decoding them (0
// for a message that is not a batch): what a consumer weighs a record by.
func CountBatch(b []byte) int {
	if len(b) == 0 || b[0] != formatV1 {
		return 0
	}
	b = b[1:]
	n := 0
	for len(b) > 0 {
		_, _, l := protowire.ConsumeField(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		n++
	}
	return n
}

// DecodeBatch appends the events encoded in b to dst. Any malformed byte
// fails the whole message with an error wrapping ErrFormat.
func DecodeBatch(b []byte, dst []Event) ([]Event, error) {
	if len(b) == 0 || b[0] != formatV1 {
		return dst, fmt.Errorf("%w: unknown format version", ErrFormat)
	}
	// Sized once: growing it event by event copied every event about
	// twice (a record packs up to 4096).
	dst = slices.Grow(dst, CountBatch(b))
	b = b[1:]
	in := interner{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return dst, fmt.Errorf("%w: %v", ErrFormat, protowire.ParseError(n))
		}
		b = b[n:]
		if num != fEvents || typ != protowire.BytesType {
			return dst, fmt.Errorf("%w: unexpected field %d", ErrFormat, num)
		}
		rec, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return dst, fmt.Errorf("%w: %v", ErrFormat, protowire.ParseError(n))
		}
		b = b[n:]
		e, err := decodeEvent(rec, in)
		if err != nil {
			return dst, err
		}
		dst = append(dst, e)
	}
	return dst, nil
}

// interner shares one string among the events of a record for the
// fields that repeat (service, method, status, code, caller): one
// allocation per distinct value instead of one per event, which was most
// of the sink's decoding and garbage. Its size is bounded by the record's.
type interner map[string]string

func (in interner) get(v []byte) string {
	if s, ok := in[string(v)]; ok { // no allocation for the lookup
		return s
	}
	s := string(v)
	in[s] = s
	return s
}

func decodeEvent(b []byte, in interner) (Event, error) {
	var e Event
	var micros int64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, fmt.Errorf("%w: %v", ErrFormat, protowire.ParseError(n))
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return e, fmt.Errorf("%w: %v", ErrFormat, protowire.ParseError(n))
			}
			b = b[n:]
			switch num {
			case fRequestID:
				e.RequestID = string(v)
			case fServiceName:
				e.ServiceName = in.get(v)
			case fMethodName:
				e.MethodName = in.get(v)
			case fStatus:
				e.Status = in.get(v)
			case fGRPCStatusCode:
				e.GRPCStatusCode = in.get(v)
			case fErrorMessage:
				e.ErrorMessage = in.get(v)
			case fClientIP:
				e.ClientIP = in.get(v)
			case fUsername:
				e.Username = in.get(v)
			case fAPIKeyName:
				e.APIKeyName = in.get(v)
			case fReportedBy:
				e.ReportedBy = in.get(v)
			}
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return e, fmt.Errorf("%w: %v", ErrFormat, protowire.ParseError(n))
			}
			b = b[n:]
			switch num {
			case fDurationMS:
				e.DurationMS = int64(v)
			case fCreatedAtMicros:
				micros = int64(v)
			case fUserID:
				e.UserID = int64(v)
			case fIsAuthenticated:
				e.IsAuthenticated = protowire.DecodeBool(v)
			case fAPIKeyID:
				e.APIKeyID = int64(v)
			}
		default:
			// Unknown fields of a newer writer are skipped, as protobuf does.
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return e, fmt.Errorf("%w: %v", ErrFormat, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	e.CreatedAt = time.UnixMicro(micros).UTC()
	return e, nil
}

// Bits of a request-log id: ID packs where the event sits in Kafka into
// 53 bits, so the id is an exact JSON number (at most 2^53-1).
const (
	idIndexBits     = 12 // PackEvents is at most 4096
	idOffsetBits    = 36 // 68 billion records per partition
	idPartitionBits = 5  // 32 partitions
)

// ID returns the stable id of the index-th event of the record at offset
// of partition: the same on every replay of the topic, and at most
// MaxJSONInt.
func ID(partition int32, offset int64, index int) uint64 {
	return uint64(partition)<<(idOffsetBits+idIndexBits) | uint64(offset)<<idIndexBits | uint64(index)
}

// IDFits reports whether every event of a record of events events at
// offset of partition has an ID.
func IDFits(partition int32, offset int64, events int) bool {
	return partition >= 0 && partition < 1<<idPartitionBits && offset >= 0 && offset < 1<<idOffsetBits && events <= 1<<idIndexBits
}

// IDIndexMask keeps an id's index bits (the same in ids of every layout
// cfgd wrote).
const IDIndexMask = 1<<idIndexBits - 1

// IDParts is where the event id names sits in Kafka: ID's inverse.
func IDParts(id uint64) (partition int32, offset int64, index int) {
	return int32(id >> (idOffsetBits + idIndexBits)), int64(id>>idIndexBits) & (1<<idOffsetBits - 1), IDIndex(id)
}

// IDIndex is the index within its record of the event id names (the
// same bits in ids of every layout cfgd wrote).
func IDIndex(id uint64) int { return int(id & (1<<idIndexBits - 1)) }
