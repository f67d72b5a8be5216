package sinks

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// RequestLogID returns the stable id of the index-th event of the record
// at offset of partition (requestlog.ID: 53 bits, an exact JSON number).
func RequestLogID(partition int32, offset int64, index int) uint64 {
	return requestlog.ID(partition, offset, index)
}

// batch is what one insert carries.
type batch struct {
	rows   RequestLogRows
	poison []poisoned
	// last is the highest offset seen per partition, committed after the
	// insert.
	last map[int32]int64
	// records counts Kafka records, first the time the batch started.
	records int
	first   time.Time
}

type poisoned struct {
	msg    *sarama.ConsumerMessage
	reason string // kafka.ReasonUndecodable or kafka.ReasonInvalid
	err    error
}

func newBatch() *batch { return &batch{last: map[int32]int64{}} }

func (b *batch) add(m *sarama.ConsumerMessage, v *events.Signer) { b.addDecoded(decode(m, v)) }

func (b *batch) addDecoded(d decoded) {
	m := d.msg
	if b.records == 0 {
		b.first = time.Now()
	}
	b.records++
	b.last[m.Partition] = max(b.last[m.Partition], m.Offset)
	if d.err != nil {
		b.poison = append(b.poison, poisoned{msg: m, reason: d.reason, err: d.err})
		return
	}
	b.poison = append(b.poison, d.bad...)
	for i := range d.evs {
		if d.skip[i] {
			continue
		}
		b.rows.Add(m.Partition, m.Offset, i, &d.evs[i])
	}
}

// recordEvents weighs a record for the batch bound: the events it packs.
func recordEvents(m *sarama.ConsumerMessage) int { return max(1, requestlog.CountBatch(m.Value)) }

// handle inserts one batch (records of every partition the member holds);
// the loop commits its offsets afterwards, and retries it while ClickHouse
// is down.
func (s *RequestLogs) handle(ctx context.Context, msgs *kafka.Batch) error {
	if msgs.Session != s.heldSession {
		clear(s.held)
		s.heldSession = msgs.Session
	}
	b := newBatch()
	for _, m := range msgs.Messages {
		b.add(m, s.cfg.Signer)
	}
	// The insert shares one hold of the fence: a replay swaps tables
	// before or after the whole batch.
	return s.fenced(ctx, func(gen int64) error {
		if gen != s.heldGen {
			// A replay swapped the tables since held was read. If it
			// died inside its swap, the live raw table may lack its
			// views: put back whatever is missing before writing.
			if err := requestlogview.CreateTables(ctx, s.conn, requestlogview.LiveTables(), s.cfg.RetentionDays); err != nil {
				return err
			}
			clear(s.held)
			s.heldGen = gen
		}
		return s.write(ctx, msgs, b)
	})
}

// write sends the poison records to the dead-letter topic and inserts the
// rows ClickHouse does not hold yet. Both steps are safe to repeat.
func (s *RequestLogs) write(ctx context.Context, msgs *kafka.Batch, b *batch) error {
	for _, p := range b.poison {
		if err := msgs.DeadLetter(ctx, p.msg, "requestlog-sink", p.reason, p.err); err != nil {
			return err
		}
		s.poisoned.Add(1)
		s.metrics.deadLettered(SinkRequestLog, p.reason)
	}
	b.poison = nil
	if err := s.loadHeld(ctx, b); err != nil {
		return err
	}
	keep := b.rows.without(s.held)
	s.skipped.Add(int64(b.rows.Len() - keep.Len()))
	if keep.Len() > 0 {
		if err := s.metrics.write(SinkRequestLog, keep.Len(), func() error { return keep.Insert(ctx, s.conn) }); err != nil {
			// The insert may have landed before the error (a connection
			// lost on the way back): ask ClickHouse again before retrying.
			for p := range b.last {
				delete(s.held, p)
			}
			return err
		}
		s.inserted.Add(int64(keep.Len()))
		for i, p := range keep.partition {
			s.held[int32(p)] = max(s.held[int32(p)], int64(keep.offset[i]))
		}
	}
	b.rows = keep
	if s.afterInsert != nil {
		if err := s.afterInsert(); err != nil {
			return kafka.Stop(err)
		}
	}
	b.rows = RequestLogRows{}
	return nil
}

// loadHeld reads, for the partitions of b not seen yet this session, the
// highest offset ClickHouse holds. A partition's records are inserted in
// offset order, one batch after another, so everything at or below that
// offset is in and everything above is not.
func (s *RequestLogs) loadHeld(ctx context.Context, b *batch) error {
	var missing []string
	for p := range b.last {
		if _, ok := s.held[p]; !ok {
			missing = append(missing, strconv.Itoa(int(p)))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	q := fmt.Sprintf("SELECT kafka_partition, max(kafka_offset) FROM %s WHERE kafka_partition IN (%s) GROUP BY kafka_partition",
		requestlogview.RawTable, strings.Join(missing, ","))
	rs, err := s.conn.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("held offsets: %w", err)
	}
	defer rs.Close()
	found := map[int32]int64{}
	for rs.Next() {
		var p uint16
		var off uint64
		if err := rs.Scan(&p, &off); err != nil {
			return fmt.Errorf("held offsets: %w", err)
		}
		found[int32(p)] = int64(off)
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("held offsets: %w", err)
	}
	for _, ps := range missing {
		p, _ := strconv.Atoi(ps)
		if off, ok := found[int32(p)]; ok {
			s.held[int32(p)] = off
		} else {
			s.held[int32(p)] = -1
		}
	}
	return nil
}
