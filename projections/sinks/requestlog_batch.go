package sinks

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/deploy/process"
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
		// A new session: the topic may have been deleted and created
		// again meanwhile.
		if err := s.checkTopic(ctx); err != nil {
			return err
		}
		if err := s.cfg.Cutover.Session(ctx, msgs.Session); err != nil {
			return err
		}
		clear(s.held)
		s.heldSession = msgs.Session
	}
	b := newBatch()
	// Room for every event the records pack, so no column is copied while
	// the batch fills. The consume loop weighed the records already but
	// does not hand the weights over (kafka.Batch); counting again only
	// walks each record's field tags.
	room := 0
	for _, m := range msgs.Messages {
		room += recordEvents(m)
	}
	b.rows.Grow(room)
	// A record only a newer cfgd understands holds its partition: the
	// batch is applied without it and what follows it there, and it waits
	// for a newer member of the group.
	var newer error
	var at []*sarama.ConsumerMessage
	held := map[int32]bool{}
	ds := make([]decoded, 0, decodeWindow)
	for lo := 0; lo < len(msgs.Messages); lo += decodeWindow {
		win := msgs.Messages[lo:min(lo+decodeWindow, len(msgs.Messages))]
		ds = s.decodeAll(ds, win)
		for i, m := range win {
			if held[m.Partition] {
				continue
			}
			d := ds[i]
			if d.newer != nil {
				newer, held[m.Partition], at = d.newer, true, append(at, m)
				continue
			}
			b.addDecoded(d)
		}
	}
	if b.records == 0 && newer != nil {
		return kafka.Yield(newer, at...)
	}
	parts := make([]int32, 0, len(b.last))
	for p := range b.last {
		parts = append(parts, p)
	}
	// The insert shares one hold of the fence: a replay swaps tables
	// before or after the whole batch, and no other sink writes these
	// partitions meanwhile.
	err := s.owned(ctx, parts, func(gen int64, stale []int32, base map[int32]int64) error {
		for _, p := range stale {
			delete(s.held, p)
		}
		b.rows.rebase(base)
		if gen != s.heldGen {
			// A replay swapped the tables since held was read. If it
			// died inside its swap, the live raw table may lack its
			// views: writing then would leave the rollups behind.
			if err := s.checkSchema(ctx); err != nil {
				return err
			}
			clear(s.held)
			s.heldGen = gen
		}
		return s.write(ctx, msgs, b)
	})
	if err == nil && newer != nil {
		return kafka.Yield(newer, at...)
	}
	return err
}

// decodeWindow is how many records are decoded at once (on every core)
// before their rows are added: it bounds the decoded events held beside
// the batch's rows.
const decodeWindow = 64

// decodeAll returns msgs decoded, in order (reusing ds), verifying and
// decoding them on up to GOMAXPROCS goroutines: the decoding was the
// largest cost of the sink besides the insert, and ClickHouse idles
// meanwhile.
func (s *RequestLogs) decodeAll(ds []decoded, msgs []*sarama.ConsumerMessage) []decoded {
	ds = slices.Grow(ds[:0], len(msgs))[:len(msgs)]
	workers := min(runtime.GOMAXPROCS(0), len(msgs))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(msgs); i += workers {
				ds[i] = decode(msgs[i], s.cfg.Signer, s.cfg.Cutover)
			}
		})
	}
	wg.Wait()
	return ds
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
	if s.cfg.Cluster != "" && s.short(b) {
		// On a cluster a rollup may only look short on the replica read:
		// its parts are fetched after the raw table's. Read again once
		// no replica has parts to fetch.
		s.forget(b)
		if err := s.waitInserts(ctx, true); err != nil {
			return err
		}
		if err := s.loadHeld(ctx, b); err != nil {
			return err
		}
	}
	if err := s.refill(ctx, b); err != nil {
		s.forget(b)
		return err
	}
	keep := b.rows.without(s.held)
	s.skipped.Add(int64(b.rows.Len() - keep.Len()))
	if keep.Len() > 0 {
		insert := func() error { return keep.Insert(ctx, s.conn) }
		if s.insert != nil {
			insert = func() error { return s.insert(ctx, &keep) }
		}
		if err := s.metrics.write(SinkRequestLog, keep.Len(), insert); err != nil {
			// The insert may have landed before the error (a connection
			// lost on the way back), in the raw table and some rollups
			// (a view's insert failed): ask ClickHouse again before
			// retrying, and check its rollups for exactly its range
			// once the raw table holds it.
			s.forget(b)
			s.recordFailed(&keep)
			return err
		}
		s.inserted.Add(int64(keep.Len()))
		for i, p := range keep.partition {
			h := s.held[int32(p)]
			for t := range h {
				h[t] = max(h[t], int64(keep.offset[i]))
			}
			s.held[int32(p)] = h
		}
	}
	if err := s.verifyFailed(ctx, b); err != nil {
		s.forget(b)
		return err
	}
	b.rows = keep
	if s.afterInsert != nil {
		if err := s.afterInsert(); err != nil {
			return kafka.Stop(err)
		}
	}
	b.rows = RequestLogRows{}
	s.topicNotice.Store(nil)
	return nil
}

// checkTopic compares the topic's id with the one recorded beside the
// offsets ClickHouse holds. When the topic was deleted and created again,
// its offsets start over: the fence then stores the new topic's records
// after the old one's (an offset base per partition), and the sink says
// so in its log, stats and readiness.
func (s *RequestLogs) checkTopic(ctx context.Context) error {
	if s.fence == nil {
		return nil // nothing to record the id in (tests, benchmarks)
	}
	id, err := kafka.TopicID(ctx, s.cfg.Bus, kafka.TopicRequestLogs)
	if errors.Is(err, kafka.ErrNoTopicID) {
		return nil // brokers before 2.8: nothing to compare
	}
	if err != nil {
		return err
	}
	recreated, err := s.fence.Recreated(ctx, s.topic, id, func(ctx context.Context) (map[int32]int64, error) {
		next := map[int32]int64{}
		q := "SELECT kafka_partition, max(kafka_offset) FROM " + requestlogview.RawTable + " GROUP BY kafka_partition"
		for _, rctx := range s.heldReads(ctx) {
			if err := s.scanHeld(rctx, q, func(p int32, off int64) { next[p] = max(next[p], off+1) }); err != nil {
				return nil, fmt.Errorf("held offsets: %w", err)
			}
		}
		return next, nil
	})
	if err != nil {
		return err
	}
	if recreated {
		s.topicRecreated(ctx, id)
	}
	return nil
}

// topicRecreated says, in the log, the stats and Ready (until the next
// batch is in), that the topic was created again.
func (s *RequestLogs) topicRecreated(ctx context.Context, id string) {
	s.recreated.Add(1)
	s.topicNotice.Store(&topicNotice{err: process.NotReady(process.TopicRecreated, fmt.Errorf("%w: %s (id %s) was deleted and created again; "+
		"its records are stored after the old topic's, from its start", errTopicRecreated, s.topic, id))})
	s.log.WarnContext(ctx, "request-log topic was deleted and created again: continuing from its start",
		"topic", s.topic, "topic_id", id)
}

// short tells whether a rollup holds less of one of b's partitions than
// the raw table.
func (s *RequestLogs) short(b *batch) bool {
	for p := range b.last {
		h := s.held[p]
		if h[1] < h[0] || h[2] < h[0] || h[3] < h[0] {
			return true
		}
	}
	return false
}

// forget drops what held says of b's partitions: it is read again from
// ClickHouse before the next insert.
func (s *RequestLogs) forget(b *batch) {
	for p := range b.last {
		delete(s.held, p)
	}
}

// refill gives every rollup that holds less of one of b's partitions than
// the raw table the aggregates of the raw rows it lacks. That happens when
// an insert into the raw table landed but a view's insert into a rollup
// failed: the retry skips the raw rows, so without this the rollup would
// stay short for good. Rows reach a rollup in offset order, by the views
// or by refill, so a rollup holds every row of a partition up to the
// offset it records and none above.
func (s *RequestLogs) refill(ctx context.Context, b *batch) error {
	live := requestlogview.LiveTables()
	for p := range b.last {
		h := s.held[p]
		for i, rollup := range live.Rollups() {
			if h[i+1] >= h[0] {
				continue
			}
			q, err := requestlogview.RollupRefill(live, rollup, p, h[i+1]+1, h[0])
			if err != nil {
				return err
			}
			if err := s.conn.Exec(ctx, q); err != nil {
				return fmt.Errorf("refill %s, partition %d, offsets %d..%d: %w", rollup, p, h[i+1]+1, h[0], err)
			}
			s.log.WarnContext(ctx, "request-log rollup refilled from the raw table after a partial insert",
				"rollup", rollup, "partition", p, "from_offset", h[i+1]+1, "to_offset", h[0])
			s.refilled.Add(1)
			h[i+1] = h[0]
			s.held[p] = h
		}
	}
	return nil
}

// loadHeld reads, for the partitions of b not seen yet this session, the
// highest offset each table holds: the raw table's rows, and the offsets
// the rollups record beside their counts. A partition's records are
// inserted in offset order, one batch after another, so everything at or
// below that offset is in a table and everything above is not.
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
	if err := s.waitInserts(ctx, false); err != nil {
		return err
	}
	in := strings.Join(missing, ",")
	found := map[int32][4]int64{}
	for _, p := range missing {
		n, _ := strconv.Atoi(p)
		found[int32(n)] = [4]int64{-1, -1, -1, -1}
	}
	for t, table := range requestlogview.LiveTables().All() {
		agg := "max(kafka_offset)"
		if t > 0 {
			agg = "maxMerge(kafka_offset)"
		}
		q := fmt.Sprintf("SELECT kafka_partition, %s FROM %s WHERE kafka_partition IN (%s) GROUP BY kafka_partition", agg, table, in)
		for _, rctx := range s.heldReads(ctx) {
			if err := s.scanHeld(rctx, q, func(p int32, off int64) {
				h := found[p]
				h[t] = max(h[t], off)
				found[p] = h
			}); err != nil {
				return fmt.Errorf("held offsets of %s: %w", table, err)
			}
		}
	}
	for p, h := range found {
		s.held[p] = h
	}
	return nil
}

// insertWait bounds waitInserts: past it the batch fails and is retried.
const insertWait = time.Minute

// inFlightInserts lists the inserts into the live raw table running on a
// server: the sink's own, one a stopped or killed sink left behind, and on
// a cluster the share of a Distributed insert its initiator sends each
// shard's replica as an insert into the replicated table
// (requestlog_raw_local), which a replica started by another server's
// client runs.
const inFlightInserts = "SELECT query_id FROM system.processes WHERE match(query, " +
	"'(?i)^\\\\s*INSERT\\\\s+INTO\\\\s+(\\\\S+\\\\.)?`?" + requestlogview.RawTable + "(" + requestlogview.LocalSuffix + ")?`?[\\\\s(]')"

// replicaQueues reads, on a server of a cluster, how far each request-log
// replicated table of a database is in fetching what the other replicas
// wrote: the oldest part still to fetch (the time its writer logged it)
// and the replication log's entries copied (log_pointer is one past the
// last entry copied; 0, an empty log, is not told from one entry not yet
// copied). The raw table's part arrives before its rollups', so a replica
// read in between (the offset check reads the first replica of a shard,
// and an insert through a server of a shard's other replica writes there)
// shows the rollups short of the raw table, and refill would count the
// rows the fetches are about to bring.
const replicaQueues = `SELECT table, inserts_in_queue, toUInt32(inserts_oldest_time), log_pointer, log_max_index, toUInt32(now())
FROM system.replicas WHERE database = ? AND table IN (?, ?, ?, ?)`

// serverTimeout bounds one look at a server's inserts: a server that does
// not answer in time (paused) may be running one, and the batch waits.
const serverTimeout = 5 * time.Second

// waitInserts waits until the inserts into the live raw table running now
// have ended and, with replicas on a cluster, every replica of the
// request-log tables has then fetched every part written before. A sink
// that was stopped or killed during an insert, or lost its partitions in a
// rebalance while its insert ran, leaves it running on the server, which
// writes the raw rows first and its views' rows after (ClickHouse finishes
// an insert whose client has gone): offsets read in between show a rollup
// short of the raw table, and refill would count the rows the views are
// about to write a second time. On a cluster that insert may run on any
// server (each replica reaches the cluster through its own), so every
// server of it is asked: one that refuses the connection runs nothing, one
// that cannot be asked (paused, starting) fails the batch, which is
// retried.
//
// It is a barrier, not a wait for quiet: an insert or a part that comes
// after it is another sink's, of partitions this one does not hold (and
// this sink does not insert while it waits), so it is not waited for. A
// wait for a moment with no insert anywhere and no part to fetch never
// ended while the other replica's sink ingested at full rate (chaos
// finding 9).
func (s *RequestLogs) waitInserts(ctx context.Context, replicas bool) error {
	servers, closeAll, err := s.insertServers(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	deadline := time.Now().Add(insertWait)
	// The inserts running now, initiators and the shares they send the
	// shards alike: a share that starts later belongs to an initiator
	// running now, which ends after it.
	before := make([]map[string]bool, len(servers))
	for i, sv := range servers {
		if before[i], err = sv.inserts(ctx); err != nil {
			return fmt.Errorf("inserts in flight on %s: %w", sv.addr, err)
		}
	}
	for {
		var n int
		for i, sv := range servers {
			now, err := sv.inserts(ctx)
			if err != nil {
				return fmt.Errorf("inserts in flight on %s: %w", sv.addr, err)
			}
			for id := range before[i] {
				if !now[id] {
					delete(before[i], id)
				}
			}
			n += len(before[i])
		}
		if n == 0 {
			break
		}
		if err := s.waitRound(ctx, deadline, fmt.Sprintf("%d inserts into %s still run", n, requestlogview.RawTable)); err != nil {
			return err
		}
	}
	if !replicas {
		return nil
	}
	// Every part written so far is logged: each replica fetches what
	// it lacks of it.
	marks := make([]map[string]replicaQueue, len(servers))
	for i, sv := range servers {
		if marks[i], err = sv.queues(ctx); err != nil {
			return fmt.Errorf("replicas on %s: %w", sv.addr, err)
		}
	}
	for {
		var behind []string
		for i, sv := range servers {
			now, err := sv.queues(ctx)
			if err != nil {
				return fmt.Errorf("replicas on %s: %w", sv.addr, err)
			}
			for table, mark := range marks[i] {
				if q, ok := now[table]; ok && q.behind(mark) {
					behind = append(behind, sv.addr+" "+table)
				} else {
					delete(marks[i], table)
				}
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if err := s.waitRound(ctx, deadline, fmt.Sprintf("replicas still fetch parts written before (%s)", strings.Join(behind, ", "))); err != nil {
			return err
		}
	}
}

// waitRound waits before the next look, or fails with what is still
// waited for once the deadline has passed.
func (s *RequestLogs) waitRound(ctx context.Context, deadline time.Time, what string) error {
	if time.Now().After(deadline) {
		return fmt.Errorf("%s after %v: reading the offsets ClickHouse holds later", what, insertWait)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(50 * time.Millisecond):
		return nil
	}
}

// insertServer is one server waitInserts asks; conn is nil for one that
// refused the connection. database is the sink's, on a cluster.
type insertServer struct {
	addr, database string
	conn           driver.Conn
}

// inserts are the query ids of the inserts into the raw table running on
// the server.
func (sv insertServer) inserts(ctx context.Context) (map[string]bool, error) {
	ids := map[string]bool{}
	if sv.conn == nil {
		return ids, nil
	}
	ctx, cancel := context.WithTimeout(ctx, serverTimeout)
	defer cancel()
	rs, err := sv.conn.Query(ctx, inFlightInserts)
	if isRefused(err) {
		return ids, nil // it went down meanwhile, with whatever it ran
	}
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			return nil, err
		}
		ids[id] = true
	}
	return ids, rs.Err()
}

// replicaQueue is where one replicated table stands in fetching parts.
type replicaQueue struct {
	inserts                 uint32 // parts to fetch
	oldest                  uint32 // when the oldest of them was written (unix seconds)
	logPointer, logMaxIndex uint64
	now                     uint32 // the server's clock when read
}

// behind tells whether the replica still has to fetch a part logged by
// the time mark was read.
func (q replicaQueue) behind(mark replicaQueue) bool {
	return (q.inserts > 0 && q.oldest <= mark.now) || (q.logPointer > 0 && q.logPointer <= mark.logMaxIndex)
}

// queues reads where each request-log replicated table of the server
// stands; none for a server that is down or a database with no replicas.
func (sv insertServer) queues(ctx context.Context) (map[string]replicaQueue, error) {
	out := map[string]replicaQueue{}
	if sv.conn == nil || sv.database == "" {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(ctx, serverTimeout)
	defer cancel()
	live := requestlogview.LiveTables().Suffixed(requestlogview.LocalSuffix)
	rs, err := sv.conn.Query(ctx, replicaQueues, sv.database, live.Raw, live.Minute, live.Hour, live.Day)
	if isRefused(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	for rs.Next() {
		var table string
		var q replicaQueue
		if err := rs.Scan(&table, &q.inserts, &q.oldest, &q.logPointer, &q.logMaxIndex, &q.now); err != nil {
			return nil, err
		}
		out[table] = q
	}
	return out, rs.Err()
}

// insertServers are the servers an insert into the raw table may run on:
// the sink's own server, or every server of the cluster (system.clusters),
// each reached with Dial.
func (s *RequestLogs) insertServers(ctx context.Context) ([]insertServer, func(), error) {
	if s.cfg.Cluster == "" {
		return []insertServer{{addr: "the sink's server", conn: s.conn}}, func() {}, nil
	}
	addrs, err := requestlogview.ClusterServers(ctx, s.conn, s.cfg.Cluster)
	if err != nil {
		return nil, nil, fmt.Errorf("inserts in flight: %w", err)
	}
	var db string
	if err := s.conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&db); err != nil {
		return nil, nil, fmt.Errorf("request-log database: %w", err)
	}
	var out []insertServer
	closeAll := func() {
		for _, sv := range out {
			if sv.conn != nil {
				_ = sv.conn.Close()
			}
		}
	}
	for _, addr := range addrs {
		conn, err := s.cfg.Dial(ctx, addr)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("inserts in flight on %s: %w", addr, err)
		}
		out = append(out, insertServer{addr: addr, database: db, conn: conn})
		pctx, cancel := context.WithTimeout(ctx, serverTimeout)
		err = conn.Ping(pctx)
		cancel()
		switch {
		case isRefused(err):
			// Not running: an insert it ran died with it.
			_ = conn.Close()
			out[len(out)-1].conn = nil
		case err != nil:
			closeAll()
			return nil, nil, fmt.Errorf("inserts in flight on %s: %w", addr, err)
		}
	}
	return out, closeAll, nil
}

// isRefused tells a server that is not running (nothing listens on its
// port) from one that does not answer.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

func (s *RequestLogs) scanHeld(ctx context.Context, q string, fn func(p int32, off int64)) error {
	rs, err := s.conn.Query(ctx, q)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		var p uint16
		var off uint64
		if err := rs.Scan(&p, &off); err != nil {
			return err
		}
		fn(int32(p), int64(off))
	}
	return rs.Err()
}
