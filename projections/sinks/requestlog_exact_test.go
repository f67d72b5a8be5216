package sinks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// rollupsMatchRaw fails t unless every rollup holds, per bucket, service
// and method, exactly what the raw table's rows give: requests, errors,
// the duration sum and the offsets recorded.
func rollupsMatchRaw(t *testing.T, conn driver.Conn) {
	t.Helper()
	ctx := context.Background()
	read := func(q string) map[string]string {
		rs, err := conn.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		out := map[string]string{}
		for rs.Next() {
			var key, val string
			if err := rs.Scan(&key, &val); err != nil {
				t.Fatal(err)
			}
			out[key] = val
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	live := requestlogview.LiveTables()
	for i, rollup := range live.Rollups() {
		seconds := []int{60, 3600, 86400}[i]
		raw := read(fmt.Sprintf(`SELECT concat(toString(intDiv(toUInt32(created_at), %d)), '/', service_name, '/', method_name),
			concat(toString(count()), '/', toString(countIf(status = 'error')), '/', toString(sum(duration_ms)))
			FROM %s GROUP BY intDiv(toUInt32(created_at), %d), service_name, method_name`, seconds, live.Raw, seconds))
		got := read(fmt.Sprintf(`SELECT concat(toString(intDiv(toUInt32(bucket), %d)), '/', service_name, '/', method_name),
			concat(toString(countMerge(requests)), '/', toString(countIfMerge(errors)), '/', toString(sumMerge(duration_sum)))
			FROM %s GROUP BY bucket, service_name, method_name`, seconds, rollup))
		if len(raw) == 0 {
			t.Fatal("the raw table is empty")
		}
		for k, v := range raw {
			if got[k] != v {
				t.Errorf("%s %s holds %q (requests/errors/duration), the raw rows give %q", rollup, k, got[k], v)
			}
		}
		for k, v := range got {
			if _, ok := raw[k]; !ok {
				t.Errorf("%s %s holds %q, the raw table nothing", rollup, k, v)
			}
		}
		rawOffsets := read(fmt.Sprintf("SELECT toString(kafka_partition), toString(max(kafka_offset)) FROM %s GROUP BY kafka_partition", live.Raw))
		offsets := read(fmt.Sprintf("SELECT toString(kafka_partition), toString(maxMerge(kafka_offset)) FROM %s GROUP BY kafka_partition", rollup))
		if fmt.Sprint(rawOffsets) != fmt.Sprint(offsets) {
			t.Errorf("%s records offsets %v, the raw table holds %v", rollup, offsets, rawOffsets)
		}
	}
}

// An insert whose raw rows land while a rollup's view refuses them (here
// the hour rollup is swapped for a table of the wrong shape) is retried;
// the retry skips the raw rows, and the rollup gets them from the raw
// table instead: the statistics equal what the raw rows give.
func TestSinkRefillsRollupsAfterPartialInsert(t *testing.T) {
	t.Parallel()
	e := newRLEnv(t, 2)
	ctx := context.Background()
	e.produce(600)
	s, _ := e.sink(e.conn, "g", nil)
	testenv.ExactRequestLogs(t, e.conn, 600)

	// The impostor has every column, so the view's insert starts (after
	// the raw rows are written), and fails on the first one's type.
	var cols []string
	rs, err := e.conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = currentDatabase() AND table = 'requestlog_hour'")
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var name, typ string
		if err := rs.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		if name == "requests" {
			typ = "UInt8"
		}
		cols = append(cols, name+" "+typ)
	}
	rs.Close()
	for _, q := range []string{
		"RENAME TABLE requestlog_hour TO requestlog_hour_away",
		"CREATE TABLE requestlog_hour (" + strings.Join(cols, ", ") + ") ENGINE = Memory",
	} {
		if err := e.conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	e.produce(900)
	waitFor(t, "raw rows of a failing insert, and the sink retrying", func() bool {
		var raw uint64
		if err := e.conn.QueryRow(ctx, "SELECT count() FROM requestlog_raw").Scan(&raw); err != nil {
			t.Fatal(err)
		}
		return raw > 600 && s.Ready(ctx) != nil
	})
	for _, q := range []string{"DROP TABLE requestlog_hour", "RENAME TABLE requestlog_hour_away TO requestlog_hour"} {
		if err := e.conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	testenv.ExactRequestLogs(t, e.conn, 1500)
	rollupsMatchRaw(t, e.conn)
	if st := s.Stats(); st.Refilled == 0 {
		t.Fatalf("stats %+v: want refills", st)
	}
}

// Two sinks in two consumer groups on one topic (a group renamed during a
// rolling update) both get every record; each batch holds its partitions
// and reads ClickHouse's offsets again when the other sink wrote them
// last, so every record is counted once.
func TestSinkTwoGroupsOnOneTopicCountOnce(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, 2)
	a := e.fencedSinkIn("old-name", nil)
	b := e.fencedSinkIn("new-name", nil)
	want := 0
	for round := range 8 {
		e.spread(250, time.Now().Add(time.Duration(round)*time.Minute), time.Millisecond)
		want += 250
		// Both have read the round (and cached what they think ClickHouse
		// holds) before the next one.
		waitFor(t, "both sinks to pass the round", func() bool {
			sa, sb := a.Stats(), b.Stats()
			return sa.Inserted+sa.Skipped >= int64(want) && sb.Inserted+sb.Skipped >= int64(want)
		})
	}
	testenv.ExactRequestLogs(t, e.conn, uint64(want))
	rollupsMatchRaw(t, e.conn)
	if sa, sb := a.Stats(), b.Stats(); sa.Inserted+sb.Inserted != int64(want) {
		t.Fatalf("the sinks inserted %d and %d rows, want %d in all", sa.Inserted, sb.Inserted, want)
	}
}

// A topic deleted and created again starts its offsets over: the sink
// notices the new topic id, stores the new records after the old ones
// instead of taking them for rows it holds, and says so.
func TestSinkContinuesOnARecreatedTopic(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t, 2)
	ctx := context.Background()
	s := e.fencedSink(nil)
	e.spread(500, time.Now(), time.Millisecond)
	testenv.ExactRequestLogs(t, e.conn, 500)
	admin, err := sarama.NewClusterAdmin(e.bus.Brokers, e.bus.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteTopic(e.prod.Topic()); err != nil {
		t.Fatal(err)
	}
	if err := kafka.EnsureTopics(ctx, e.bus, testenv.Quiet(), kafka.TopicRequestLogs); err != nil {
		t.Fatal(err)
	}
	// A new producer: the idempotent one's sequence numbers belong to
	// the deleted topic.
	pc := requestlogkafka.DefaultProducerConfig(e.bus)
	pc.PackEvents = 50
	pc.Timeout = 10 * time.Second
	if e.prod, err = requestlogkafka.NewProducer(pc, testenv.Quiet()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.prod.Close() })
	e.spread(300, time.Now(), time.Millisecond)
	testenv.ExactRequestLogs(t, e.conn, 800)
	rollupsMatchRaw(t, e.conn)
	if st := s.Stats(); st.TopicRecreated != 1 {
		t.Fatalf("stats %+v: want the recreated topic noticed once", st)
	}
	waitFor(t, "the sink to be ready again", func() bool { return s.Ready(ctx) == nil })
	// A rebuild reads the new topic alone: it says it would lose the old
	// topic's rows rather than drop them silently.
	var loss replay.Loss
	if _, err := e.replay(ctx); !errors.As(err, &loss) || loss.Rows != 500 {
		t.Fatalf("replay after the topic was created again: %v; want a loss of 500 rows", err)
	}
	testenv.ExactRequestLogs(t, e.conn, 800)
}

// A sink stopped or killed during an insert leaves it running on the
// server, which writes the raw rows first and the rollups' rows after.
// The next owner of the partition reads the offsets ClickHouse holds only
// once that insert is over: read in between, a rollup looks short of the
// raw table, and refilling it would count the rows the views are about to
// write twice (found by make test-upgrade: a replica stopped mid-insert,
// and the overview counted 450 events twice). Here the insert left behind
// is the batch's own rows sent on a connection of their own, and views
// that sleep (they run one after the other in name order) stand before
// the rollups' views.
func TestSinkWaitsForAnInsertLeftRunning(t *testing.T) {
	t.Parallel()
	e := newRLEnv(t, 1)
	ctx := context.Background()
	e.produce(300)
	_, stop := e.sink(e.conn, "g", nil)
	testenv.ExactRequestLogs(t, e.conn, 300)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e.produce(300)
	msgs := testenv.ReadTopic(t, e.bus, e.bus.Topic(kafka.TopicRequestLogs), 12, 30*time.Second)
	left := newBatch()
	for _, m := range msgs[6:] {
		left.addDecoded(decode(m, nil, nil))
	}
	for i := range 3 { // 9 s: 3 s each, 18.16's most
		slow := fmt.Sprintf("CREATE MATERIALIZED VIEW requestlog_aaa_slow%d ENGINE = Null AS SELECT sleep(3) AS s FROM requestlog_raw", i)
		if err := e.conn.Exec(ctx, slow); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := clickhouse.Open(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	inserted := make(chan error, 1)
	go func() { inserted <- left.rows.Insert(ctx, conn) }()
	waitFor(t, "the insert left running writes its raw rows", func() bool {
		var n uint64
		if err := e.conn.QueryRow(ctx, "SELECT count() FROM requestlog_raw").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 600
	})
	next, _ := e.sink(e.conn, "g", nil)
	if err := <-inserted; err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := e.conn.Exec(ctx, fmt.Sprintf("DROP TABLE requestlog_aaa_slow%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the next owner passes the batch", func() bool { return next.Stats().Skipped+next.Stats().Inserted >= 300 })
	testenv.ExactRequestLogs(t, e.conn, 600)
	rollupsMatchRaw(t, e.conn)
	if st := next.Stats(); st.Refilled != 0 {
		t.Errorf("the next owner refilled rollups the insert left running was writing: %+v", st)
	}
}

// Chaos finding 4: an insert failed ("Unknown status, client must retry"
// while ZooKeeper was down), and its retry was deduplicated by the
// replicated raw table, which had stored the block after all: the retry
// succeeds, the views get nothing, and the next batch moves every rollup's
// highest offset past the range, so the held offsets never show the hole.
// Here the first insert fails having stored nothing visible, and the retry
// stores the raw rows alone (the views detached meanwhile), as the
// deduplicated retry did; the sink must refill exactly that range.
func TestSinkRefillsTheRangeOfAFailedInsert(t *testing.T) {
	t.Parallel()
	e := newRLEnv(t, 1)
	ctx := context.Background()
	views := requestlogview.LiveTables().Views()
	var calls int
	cfg := DefaultRequestLogConfig(e.bus)
	cfg.Group, cfg.BatchRows, cfg.BatchWait, cfg.MaxBackoff = "g", 300, 50*time.Millisecond, 200*time.Millisecond
	s, err := NewRequestLogs(cfg, e.conn, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	s.insert = func(ctx context.Context, rows *RequestLogRows) error {
		calls++
		switch calls {
		case 1:
			return errors.New("code: 319, message: Unknown status, client must retry. Reason: Connection loss: while pushing to view requestlog_minute_mv")
		case 2:
			for _, v := range views {
				if err := e.conn.Exec(ctx, "DETACH TABLE "+v); err != nil {
					return err
				}
			}
			err := rows.Insert(ctx, e.conn)
			for _, v := range views {
				if err := e.conn.Exec(ctx, "ATTACH TABLE "+v); err != nil {
					t.Error(err)
				}
			}
			return err
		}
		return rows.Insert(ctx, e.conn)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	e.produce(300)
	waitFor(t, "the first batch in", func() bool { return s.Stats().Inserted >= 300 })
	e.produce(300)
	testenv.ExactRequestLogs(t, e.conn, 600)
	rollupsMatchRaw(t, e.conn)
	if st := s.Stats(); st.Refilled != 3 {
		t.Errorf("want the failed range refilled in each of the three rollups, stats %+v", st)
	}
}
