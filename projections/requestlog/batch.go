package requestlog

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cfgd/cfgd/deploy/process"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/deploy/migrations"
	"github.com/cfgd/cfgd/events/requestlog"
)

// ID returns the stable id of the index-th event of the record at offset
// of partition: the same on every replay of the topic. It holds 11 bits of
// partition, 40 of offset and 12 of index (PackEvents is at most 4096).
func ID(partition int32, offset int64, index int) uint64 {
	return uint64(partition)<<52 | uint64(offset)<<12 | uint64(index)
}

// handler is one consumer-group session. Every claimed partition feeds one
// batcher, so a batch spans partitions and ClickHouse sees few large
// inserts.
type handler struct {
	s     *Sink
	in    chan *sarama.ConsumerMessage
	stop  chan struct{}
	done  chan struct{}
	fatal error
	// held is, per partition, the highest offset ClickHouse holds; loaded
	// once per session (another member may have written meanwhile) and
	// again after a replay swapped the tables (heldGen is the fence's
	// generation it was loaded under).
	held    map[int32]int64
	heldGen int64
}

func (h *handler) Setup(sess sarama.ConsumerGroupSession) error {
	h.in = make(chan *sarama.ConsumerMessage, 64)
	h.stop = make(chan struct{})
	h.done = make(chan struct{})
	h.held = map[int32]int64{}
	go h.batcher(sess)
	return nil
}

func (h *handler) Cleanup(sarama.ConsumerGroupSession) error {
	close(h.stop)
	<-h.done
	return nil
}

func (h *handler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			select {
			case h.in <- m:
			case <-sess.Context().Done():
				return nil
			case <-h.done:
				return nil
			}
		case <-sess.Context().Done():
			return nil
		case <-h.done:
			return nil
		}
	}
}

// batch is what one insert carries.
type batch struct {
	rows   Rows
	poison []poisoned
	// last is the highest offset seen per partition, committed after the
	// insert.
	last map[int32]int64
	// records counts Kafka records, first the time the batch started.
	records int
	first   time.Time
}

type poisoned struct {
	msg *sarama.ConsumerMessage
	err error
}

func newBatch() *batch { return &batch{last: map[int32]int64{}} }

func (b *batch) add(m *sarama.ConsumerMessage) { b.addDecoded(decode(m)) }

// decoded is a record read: its events, or why it cannot be stored.
type decoded struct {
	msg *sarama.ConsumerMessage
	evs []requestlog.Event
	err error
}

// decode reads m's events and checks them as the sink stores them (the
// replay decodes on several goroutines, then adds in partition order).
func decode(m *sarama.ConsumerMessage) decoded {
	evs, err := requestlog.DecodeBatch(m.Value, nil)
	if err == nil {
		for i, e := range evs {
			if errs := requestlog.Check(i, e); len(errs) > 0 {
				err = errs[0]
				break
			}
		}
	}
	if err == nil && (m.Partition >= 1<<11 || m.Offset >= 1<<40 || len(evs) > 1<<12) {
		err = fmt.Errorf("record outside the id space (partition %d, offset %d, %d events)", m.Partition, m.Offset, len(evs))
	}
	return decoded{msg: m, evs: evs, err: err}
}

func (b *batch) addDecoded(d decoded) {
	m := d.msg
	if b.records == 0 {
		b.first = time.Now()
	}
	b.records++
	b.last[m.Partition] = max(b.last[m.Partition], m.Offset)
	if d.err != nil {
		b.poison = append(b.poison, poisoned{msg: m, err: d.err})
		return
	}
	for i := range d.evs {
		b.rows.Add(m.Partition, m.Offset, i, &d.evs[i])
	}
}

func (h *handler) batcher(sess sarama.ConsumerGroupSession) {
	defer close(h.done)
	s := h.s
	b := newBatch()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func(final bool) bool {
		if b.records == 0 {
			return true
		}
		if err := h.flush(sess, b, final); err != nil {
			return false
		}
		b = newBatch()
		return true
	}
	for {
		select {
		case m := <-h.in:
			if b.records == 0 {
				timer.Reset(s.cfg.BatchWait)
			}
			b.add(m)
			if b.rows.Len() >= s.cfg.BatchRows {
				timer.Stop()
				if !flush(false) {
					return
				}
			}
		case <-timer.C:
			if !flush(false) {
				return
			}
		case <-h.stop:
			// The session is ending (rebalance or shutdown): one last try,
			// then whatever is left is redelivered to the next owner.
			flush(true)
			return
		}
	}
}

// flush inserts b and commits its offsets, retrying while ClickHouse is
// down; reading from Kafka pauses meanwhile since nobody drains h.in. It
// fails only when the session ends first (or on a test crash).
func (h *handler) flush(sess sarama.ConsumerGroupSession, b *batch, final bool) error {
	s := h.s
	backoff := 100 * time.Millisecond
	ctx := sess.Context()
	if final {
		// The session context is already done; bound the last attempt.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	for {
		// The insert and the offset commit share one hold of the fence: a
		// replay swaps tables before or after the whole batch.
		err := s.fenced(ctx, func(gen int64) error {
			if gen != h.heldGen {
				// A replay swapped the tables since held was read. If it
				// died inside its swap, the live raw table may lack its
				// views: put back whatever is missing before writing.
				if err := migrations.UpRequestLog(ctx, s.conn, s.cfg.RetentionDays); err != nil {
					return err
				}
				clear(h.held)
				h.heldGen = gen
			}
			if err := h.write(ctx, b); err != nil {
				return err
			}
			for p, off := range b.last {
				sess.MarkOffset(s.topic, p, off+1, "")
			}
			sess.Commit()
			return nil
		})
		if err == nil {
			break
		}
		if h.fatal != nil {
			return h.fatal
		}
		s.health.Set(fmt.Errorf("request-log sink: %w", err))
		s.log.WarnContext(ctx, "request-log batch not written, retrying", "rows", b.rows.Len(), "err", err, "retry_in", backoff.String())
		if final || !process.Sleep(ctx, backoff) {
			return err
		}
		backoff = min(backoff*2, s.cfg.MaxBackoff)
	}
	s.health.Set(nil)
	return nil
}

// write sends the poison records to the dead-letter topic and inserts the
// rows ClickHouse does not hold yet. Both steps are safe to repeat.
func (h *handler) write(ctx context.Context, b *batch) error {
	s := h.s
	if len(b.poison) > 0 {
		if err := s.deadLetter(ctx, b.poison); err != nil {
			return err
		}
		s.poisoned.Add(int64(len(b.poison)))
		for _, p := range b.poison {
			s.log.WarnContext(ctx, "request-log record sent to the dead-letter topic",
				"partition", p.msg.Partition, "offset", p.msg.Offset, "err", p.err)
		}
		b.poison = nil
	}
	if err := h.loadHeld(ctx, b); err != nil {
		return err
	}
	keep := b.rows.without(h.held)
	s.skipped.Add(int64(b.rows.Len() - keep.Len()))
	if keep.Len() > 0 {
		if err := keep.Insert(ctx, s.conn); err != nil {
			// The insert may have landed before the error (a connection
			// lost on the way back): ask ClickHouse again before retrying.
			for p := range b.last {
				delete(h.held, p)
			}
			return err
		}
		s.inserted.Add(int64(keep.Len()))
		for i, p := range keep.partition {
			h.held[int32(p)] = max(h.held[int32(p)], int64(keep.offset[i]))
		}
	}
	b.rows = keep
	if s.afterInsert != nil {
		if err := s.afterInsert(); err != nil {
			h.fatal = err
			return err
		}
	}
	b.rows = Rows{}
	return nil
}

// loadHeld reads, for the partitions of b not seen yet this session, the
// highest offset ClickHouse holds. A partition's records are inserted in
// offset order, one batch after another, so everything at or below that
// offset is in and everything above is not.
func (h *handler) loadHeld(ctx context.Context, b *batch) error {
	var missing []string
	for p := range b.last {
		if _, ok := h.held[p]; !ok {
			missing = append(missing, strconv.Itoa(int(p)))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	q := fmt.Sprintf("SELECT kafka_partition, max(kafka_offset) FROM %s WHERE kafka_partition IN (%s) GROUP BY kafka_partition",
		migrations.RequestLogRaw, strings.Join(missing, ","))
	rs, err := h.s.conn.Query(ctx, q)
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
			h.held[int32(p)] = off
		} else {
			h.held[int32(p)] = -1
		}
	}
	return nil
}

func (s *Sink) deadLetter(ctx context.Context, ps []poisoned) error {
	p, err := s.dlqProducer()
	if err != nil {
		return err
	}
	msgs := make([]*sarama.ProducerMessage, len(ps))
	for i, x := range ps {
		msgs[i] = &sarama.ProducerMessage{Topic: s.dead, Value: sarama.ByteEncoder(x.msg.Value), Headers: []sarama.RecordHeader{
			{Key: []byte("error"), Value: []byte(x.err.Error())},
			{Key: []byte("source"), Value: []byte(fmt.Sprintf("%s/%d/%d", x.msg.Topic, x.msg.Partition, x.msg.Offset))},
		}}
	}
	if err := p.SendMessages(msgs); err != nil {
		return fmt.Errorf("dead-letter topic: %w", err)
	}
	return ctx.Err()
}

func (s *Sink) dlqProducer() (sarama.SyncProducer, error) {
	s.dlqMu.Lock()
	defer s.dlqMu.Unlock()
	if s.dlq != nil {
		return s.dlq, nil
	}
	p, err := sarama.NewSyncProducer(s.cfg.Bus.Brokers, s.cfg.Bus.ProducerSarama())
	if err != nil {
		return nil, fmt.Errorf("dead-letter producer: %w", err)
	}
	s.dlq = p
	return p, nil
}

func (s *Sink) closeDLQ() {
	s.dlqMu.Lock()
	defer s.dlqMu.Unlock()
	if s.dlq != nil {
		_ = s.dlq.Close()
		s.dlq = nil
	}
}
