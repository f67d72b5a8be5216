package sinks

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/signing"
	"github.com/cfgd/cfgd/projections/replay"
)

// RequestLogCodec is the sink's decoding and rows for a replay of its tables
// (replay.NewClickHouse): a rebuild writes the rows, and the ids, the sink
// wrote, and refuses the records the sink refused.
type RequestLogCodec struct {
	// Signer verifies records as the sink's does (nil: no check), and
	// Cutover accepts the unsigned ones below its watermark (nil: none).
	Signer  *events.Signer
	Cutover *signing.Cutover
}

var _ replay.Codec = RequestLogCodec{}

// Decode implements replay.Codec.
func (c RequestLogCodec) Decode(m *sarama.ConsumerMessage) replay.Decoded {
	return decode(m, c.Signer, c.Cutover)
}

// Start implements replay.Codec: the watermark the rebuild reads under.
func (c RequestLogCodec) Start(ctx context.Context) error { return c.Cutover.Start(ctx) }

// decoded is a record read: its events, or why it cannot be stored (err),
// or which of its events cannot (skip, each with its dead letter in bad).
type decoded struct {
	msg    *sarama.ConsumerMessage
	evs    []requestlog.Event
	skip   map[int]bool
	bad    []poisoned
	reason string
	err    error
	// newer: a record only a newer cfgd understands
	// (*events.ErrNewerSchema), neither stored nor dead-lettered.
	newer error
}

// decode reads m's events and checks them as the sink stores them (the
// replay decodes on several goroutines, then adds in partition order).
// With v, a record whose signature does not verify (nor is an unsigned one
// below cut's watermark) is refused whole: its bytes are not cfgd's. An event that fails Check is dead-lettered on its
// own, as a record of that one event, and its neighbours are stored with
// the ids they have anyway, so one caller's bad bytes cost no other
// caller's rows.
func decode(m *sarama.ConsumerMessage, v *events.Signer, cut *signing.Cutover) decoded {
	if v != nil {
		if err := cut.Verify(v, m); err != nil {
			return decoded{msg: m, reason: kafka.ReasonBadSignature, err: fmt.Errorf("request-log record: %w", err)}
		}
	}
	if err := events.CheckFormat(requestlog.BatchFormat, events.ParseSchemaHeader(header(m, events.HeaderSchemaVersion)), requestlog.BatchVersion); err != nil {
		return decoded{msg: m, newer: err}
	}
	evs, err := requestlog.DecodeBatch(m.Value, nil)
	if err != nil {
		return decoded{msg: m, reason: kafka.ReasonUndecodable, err: err}
	}
	if !requestlog.IDFits(m.Partition, m.Offset, len(evs)) {
		err = fmt.Errorf("record outside the id space (partition %d, offset %d, %d events)", m.Partition, m.Offset, len(evs))
		return decoded{msg: m, reason: kafka.ReasonInvalid, err: err}
	}
	d := decoded{msg: m, evs: evs}
	for i := range evs {
		if c, ok := requestlog.ParseCode(evs[i].GRPCStatusCode); ok {
			evs[i].GRPCStatusCode = c
		}
		errs := requestlog.Check(i, evs[i])
		if len(errs) == 0 {
			continue
		}
		if d.skip == nil {
			d.skip = map[int]bool{}
		}
		d.skip[i] = true
		one := *m
		one.Value = requestlog.AppendBatch(nil, evs[i:i+1])
		one.Headers = nil
		d.bad = append(d.bad, poisoned{msg: &one, reason: kafka.ReasonInvalid, err: errs[0]})
	}
	return d
}

func header(m *sarama.ConsumerMessage, key string) string {
	for _, h := range m.Headers {
		if h != nil && string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// NewBlock implements replay.Codec.
func (RequestLogCodec) NewBlock(rows int) replay.Block {
	b := newBatch()
	b.rows.Grow(rows + requestlog.IDIndexMask + 1)
	return &block{b: b}
}

// Message implements replay.Decoded.
func (d decoded) Message() *sarama.ConsumerMessage { return d.msg }

// Newer implements replay.Decoded.
func (d decoded) Newer() error { return d.newer }

// block is a batch as a replay.Block: the replay inserts it into its
// shadow raw table and commits no offsets.
type block struct{ b *batch }

func (k *block) Add(d replay.Decoded) { k.b.addDecoded(d.(decoded)) }
func (k *block) Rows() int            { return k.b.rows.Len() }
func (k *block) Records() int         { return k.b.records }
func (k *block) Poisoned() int        { return len(k.b.poison) }
func (k *block) Insert(ctx context.Context, conn driver.Conn, table string) error {
	return k.b.rows.InsertInto(ctx, conn, table)
}

// Reset implements replay.Block: a fresh batch on the same columns.
func (k *block) Reset() {
	rows := k.b.rows
	rows.truncate()
	k.b = newBatch()
	k.b.rows = rows
}
