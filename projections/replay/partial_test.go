package replay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// When Kafka's retention has deleted records whose rows the live tables
// still hold, a replay refuses to swap in a rebuild without them (saying
// how many rows of which days), whether the records went before the
// replay started (refused before the long read) or while it read (refused
// before the swap); with AllowPartial it swaps in the rebuild and says
// what it left out.
func TestReplayRefusesToLoseRowsRetentionDeleted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		during  bool // delete once the replay has checked the topic
		partial bool
	}{
		{"deleted before", false, false},
		{"deleted while reading", true, false},
		{"deleted before, allow partial", false, true},
		{"deleted while reading, allow partial", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newCHEnv(t, 2)
			// 50 events a record over the last three days: the lost
			// records span more than one day.
			e.spread(3000, time.Now().UTC().Add(-70*time.Hour), 80*time.Second)
			e.fencedSink()
			testenv.ExactRequestLogs(t, e.conn, 3000)
			before := chSnapshot(t, e.conn)
			liveTables := tables(t, e.conn)

			topic := e.bus.Topic(kafka.TopicRequestLogs)
			r, err := kafka.NewReader(e.bus)
			if err != nil {
				t.Fatal(err)
			}
			ends, err := r.Ends(topic)
			_ = r.Close()
			if err != nil {
				t.Fatal(err)
			}
			// The first 20 records of the fuller partition go.
			var p int32
			for q, end := range ends {
				if end > ends[p] {
					p = q
				}
			}
			const cut = 20
			if ends[p] <= cut {
				t.Fatalf("partition ends %v: too few records", ends)
			}
			lostRows := lines(t, e.conn, fmt.Sprintf("SELECT toString(count()) FROM %s WHERE kafka_partition = %d AND kafka_offset < %d",
				requestlogview.RawTable, p, cut))[0]
			lostDays := lines(t, e.conn, fmt.Sprintf("SELECT arrayStringConcat(groupArray(d), ', ') FROM (SELECT DISTINCT toString(toDate(created_at, 'UTC')) AS d FROM %s WHERE kafka_partition = %d AND kafka_offset < %d ORDER BY d)",
				requestlogview.RawTable, p, cut))[0]
			if !strings.Contains(lostDays, ",") {
				t.Fatalf("the lost rows span one day only (%s)", lostDays)
			}
			admin, err := sarama.NewClusterAdmin(e.bus.Brokers, e.bus.Sarama())
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			del := func() error { return admin.DeleteRecords(topic, map[int32]int64{p: cut}) }
			if !tc.during {
				if err := del(); err != nil {
					t.Fatal(err)
				}
			}
			var once sync.Once
			var deleted error
			cfg := replay.DefaultClickHouseConfig(e.bus)
			cfg.BatchRows = 1000
			cfg.AllowPartial = tc.partial
			target, err := replay.NewClickHouse(cfg, e.conn, e.pool, sinks.RequestLogCodec{})
			if err != nil {
				t.Fatal(err)
			}
			// The first progress report comes after the topic was checked,
			// before anything is read.
			res, err := replay.Rebuild(context.Background(), e.pool, target, func(int64, int64) {
				if tc.during {
					once.Do(func() { deleted = del() })
				}
			})
			if deleted != nil {
				t.Fatal(deleted)
			}
			if tc.partial {
				if err != nil || !res.Swapped || fmt.Sprint(res.Lost) != lostRows {
					t.Fatalf("replay with AllowPartial: %+v, %v; want it swapped in without %s rows", res, err, lostRows)
				}
				testenv.ExactRequestLogs(t, e.conn, 3000-uint64(res.Lost))
				return
			}
			want := fmt.Sprintf("the records of %s rows the live request-log tables hold (days %s, UTC)", lostRows, lostDays)
			if !errors.Is(err, replay.ErrPartial) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--allow-partial") {
				t.Fatalf("replay: %v, want replay.ErrPartial saying %q", err, want)
			}
			if !tc.during && res.Records != 0 {
				t.Fatalf("the replay read %d records before refusing, want none", res.Records)
			}
			if got := tables(t, e.conn); strings.Join(got, ",") != strings.Join(liveTables, ",") {
				t.Fatalf("tables after the refusal: %v, want %v", got, liveTables)
			}
			after := chSnapshot(t, e.conn)
			for table, rows := range before {
				sameLines(t, table+" after a refused replay", after[table], rows)
			}
		})
	}
}

// Rows older than the retention do not count as lost: the rebuild drops
// their days anyway, so Kafka deleting their records is no reason to
// refuse it.
func TestReplayIgnoresLostRowsBeyondTheRetention(t *testing.T) {
	t.Parallel()
	e := newCHEnv(t, 2)
	// Five days back first (the first records of every partition), then
	// the last hours.
	e.spread(1000, time.Now().UTC().Add(-5*24*time.Hour), time.Second)
	e.spread(2000, time.Now().UTC().Add(-3*time.Hour), time.Second)
	e.fencedSink()
	testenv.ExactRequestLogs(t, e.conn, 3000)
	// Delete, per partition, every record before the first one with a
	// recent row.
	recent := time.Now().UTC().Add(-4 * time.Hour).Unix()
	cuts := map[int32]int64{}
	for _, l := range lines(t, e.conn, fmt.Sprintf("SELECT concat(toString(kafka_partition), ' ', toString(min(kafka_offset))) FROM %s WHERE created_at >= toDateTime(%d) GROUP BY kafka_partition",
		requestlogview.RawTable, recent)) {
		var p int32
		var o int64
		if _, err := fmt.Sscan(l, &p, &o); err != nil {
			t.Fatal(err)
		}
		if o > 0 {
			cuts[p] = o
		}
	}
	if len(cuts) == 0 {
		t.Fatal("no partition starts with old records")
	}
	admin, err := sarama.NewClusterAdmin(e.bus.Brokers, e.bus.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteRecords(e.bus.Topic(kafka.TopicRequestLogs), cuts); err != nil {
		t.Fatal(err)
	}
	cfg := replay.DefaultClickHouseConfig(e.bus)
	cfg.RetentionDays = 3
	target, err := replay.NewClickHouse(cfg, e.conn, e.pool, sinks.RequestLogCodec{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := replay.Rebuild(context.Background(), e.pool, target, nil)
	if err != nil || !res.Swapped || res.Lost != 0 {
		t.Fatalf("replay: %+v, %v; want it swapped in, nothing lost", res, err)
	}
	testenv.ExactRequestLogs(t, e.conn, 2000)
}

// Records the live sink stored but the rebuild dead-letters (here records
// an older cfgd wrote unsigned, which this one's codec refuses) would be
// lost without a word: their rows are in the live tables, the topic still
// holds them, and the rebuild skips them. A replay refuses, saying how
// many rows; with AllowPartial it swaps in the rebuild and counts them
// as lost.
func TestReplayRefusesToLoseRowsItCannotRead(t *testing.T) {
	t.Parallel()
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow partial %v", partial), func(t *testing.T) {
			t.Parallel()
			e := newCHEnv(t, 2)
			// 1,500 events unsigned (an older cfgd), then 1,500 signed.
			e.spread(1500, time.Now().UTC().Add(-2*time.Hour), time.Second)
			signer := testenv.Signer(t)
			pc := requestlogkafka.DefaultProducerConfig(e.bus)
			pc.PackEvents, pc.Timeout, pc.Signer = 50, 10*time.Second, signer
			signed, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
			if err != nil {
				t.Fatal(err)
			}
			defer signed.Close()
			evs := testenv.RequestLogSpread(&e.seq, 1500, time.Now().UTC().Add(-time.Hour), time.Second)
			for i := 0; i < len(evs); i += 200 {
				if err := signed.Produce(context.Background(), evs[i:min(i+200, len(evs))]); err != nil {
					t.Fatal(err)
				}
			}
			e.fencedSink() // an older cfgd's sink: it stored both
			testenv.ExactRequestLogs(t, e.conn, 3000)
			before := chSnapshot(t, e.conn)

			cfg := replay.DefaultClickHouseConfig(e.bus)
			cfg.BatchRows = 1000
			cfg.AllowPartial = partial
			target, err := replay.NewClickHouse(cfg, e.conn, e.pool, sinks.RequestLogCodec{Signer: signer})
			if err != nil {
				t.Fatal(err)
			}
			res, err := replay.Rebuild(context.Background(), e.pool, target, nil)
			if partial {
				if err != nil || !res.Swapped || res.Lost != 1500 {
					t.Fatalf("replay with AllowPartial: %+v, %v; want it swapped in without 1500 rows", res, err)
				}
				testenv.ExactRequestLogs(t, e.conn, 1500)
				return
			}
			want := "the rebuild dead-lettered records of 1500 rows the live request-log tables hold"
			if !errors.Is(err, replay.ErrPartial) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--allow-partial") {
				t.Fatalf("replay: %+v, %v; want replay.ErrPartial saying %q", res, err, want)
			}
			after := chSnapshot(t, e.conn)
			for table, rows := range before {
				sameLines(t, table+" after a refused replay", after[table], rows)
			}
		})
	}
}
