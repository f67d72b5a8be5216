package replay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// chEnv is a private broker, ClickHouse database with the live request-log
// tables, producer and the Postgres database the fence and the busy lock
// live in.
type chEnv struct {
	t    *testing.T
	bus  kafka.Config
	conn driver.Conn
	prod *requestlogkafka.Producer
	pool *pgxpool.Pool
	seq  atomic.Int64 // events produced so far (request ids)
}

func newCHEnv(t *testing.T, partitions int) *chEnv {
	t.Helper()
	c := testenv.Kafka(t, partitions)
	_, conn := testenv.ClickHouse(t)
	pc := requestlogkafka.DefaultProducerConfig(c)
	pc.PackEvents = 50
	pc.Timeout = 10 * time.Second
	p, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if err := requestlogview.CreateTables(context.Background(), conn, requestlogview.LiveTables()); err != nil {
		t.Fatal(err)
	}
	return &chEnv{t: t, bus: c, conn: conn, prod: p, pool: testenv.Postgres(t)}
}

// spread produces n events, the i-th at from + i*step
// (testenv.RequestLogSpread).
func (e *chEnv) spread(n int, from time.Time, step time.Duration) {
	e.t.Helper()
	evs := testenv.RequestLogSpread(&e.seq, n, from, step)
	for i := 0; i < n; i += 200 {
		if err := e.prod.Produce(context.Background(), evs[i:min(i+200, n)]); err != nil {
			e.t.Fatal(err)
		}
	}
}

// fencedSink starts the live sink behind the Postgres fence, as serve runs
// it.
func (e *chEnv) fencedSink() *sinks.RequestLogs {
	e.t.Helper()
	cfg := sinks.DefaultRequestLogConfig(e.bus)
	cfg.Group = "live"
	cfg.BatchRows = 300
	cfg.BatchWait = 50 * time.Millisecond
	cfg.MaxBackoff = 200 * time.Millisecond
	s, err := sinks.NewFencedRequestLogs(cfg, e.conn, replay.PostgresFence{Pool: e.pool}, testenv.Quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return s
}

func (e *chEnv) replay(ctx context.Context, progress replay.Progress) (replay.Result, error) {
	cfg := replay.DefaultClickHouseConfig(e.bus)
	cfg.BatchRows = 1000
	t, err := replay.NewClickHouse(cfg, e.conn, e.pool, sinks.RequestLogCodec{})
	if err != nil {
		return replay.Result{}, err
	}
	return replay.Rebuild(ctx, e.pool, t, progress)
}

// lines returns every row of q, each row's columns joined by "|".
func lines(t *testing.T, conn driver.Conn, q string) []string {
	t.Helper()
	rs, err := conn.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func joined(cols []string) string {
	for i, c := range cols {
		cols[i] = "toString(" + c + ")"
	}
	return "arrayStringConcat([" + strings.Join(cols, ", ") + "], '|')"
}

// rawSnapshot is every column of every raw row, ordered by id.
func rawSnapshot(t *testing.T, conn driver.Conn) []string {
	return lines(t, conn, "SELECT "+joined(strings.Split(sinks.RequestLogColumns, ", "))+" FROM "+requestlogview.RawTable+" ORDER BY id")
}

// finals are the rollup columns finalised, in table order.
func finals(merge bool) []string {
	agg := []string{"count", "countIf", "countIf", "countIf", "countIf", "sum", "min", "max"}
	cols := []string{"requests", "successes", "errors", "timeouts", "cancellations", "duration_sum", "duration_min", "duration_max"}
	raw := []string{"count()", "countIf(status = 'success')", "countIf(status = 'error')", "countIf(status = 'timeout')",
		"countIf(status = 'cancelled')", "sum(duration_ms)", "min(duration_ms)", "max(duration_ms)"}
	var out []string
	for i := range cols {
		if merge {
			out = append(out, agg[i]+"Merge("+cols[i]+")")
		} else {
			out = append(out, raw[i])
		}
	}
	for _, b := range requestlogview.DurationBounds() {
		if merge {
			out = append(out, fmt.Sprintf("countIfMerge(duration_le_%d)", b))
		} else {
			out = append(out, fmt.Sprintf("countIf(duration_ms <= %d)", b))
		}
	}
	return out
}

var rollups = []struct {
	table   string
	seconds int
}{{requestlogview.MinuteTable, 60}, {requestlogview.HourTable, 3600}, {requestlogview.DayTable, 86400}}

// rollupSnapshot is every rollup finalised per bucket, service and method.
func rollupSnapshot(t *testing.T, conn driver.Conn, table string) []string {
	cols := append([]string{"bucket", "service_name", "method_name"}, finals(true)...)
	return lines(t, conn, "SELECT "+joined(cols)+" FROM "+table+" GROUP BY bucket, service_name, method_name ORDER BY bucket, service_name, method_name")
}

// rollupFromRaw is rollupSnapshot computed from the raw table.
func rollupFromRaw(t *testing.T, conn driver.Conn, seconds int) []string {
	bucket := fmt.Sprintf("toDateTime(intDiv(toUInt32(created_at), %d) * %d)", seconds, seconds)
	cols := append([]string{"b", "service_name", "method_name"}, finals(false)...)
	return lines(t, conn, "SELECT "+joined(cols)+" FROM (SELECT *, "+bucket+" AS b FROM "+requestlogview.RawTable+
		") GROUP BY b, service_name, method_name ORDER BY b, service_name, method_name")
}

func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: row %d is\n%s\nwant\n%s", what, i, got[i], want[i])
		}
	}
}

func chSnapshot(t *testing.T, conn driver.Conn) map[string][]string {
	out := map[string][]string{requestlogview.RawTable: rawSnapshot(t, conn)}
	for _, r := range rollups {
		out[r.table] = rollupSnapshot(t, conn, r.table)
	}
	return out
}

// tables are the request-log tables and views of conn's database.
func tables(t *testing.T, conn driver.Conn) []string {
	return lines(t, conn, "SELECT name FROM system.tables WHERE database = currentDatabase() AND name LIKE 'requestlog%' ORDER BY name")
}

func TestReplayRebuildsTheSameRowsAndRollups(t *testing.T) {
	t.Parallel()
	e := newCHEnv(t, 3)
	// Two and a half days back from now, one event every 40 s: many
	// minutes, hours and three days, inside the retention.
	now := time.Now().UTC()
	e.spread(5400, now.Add(-60*time.Hour), 40*time.Second)
	e.fencedSink()
	testenv.ExactRequestLogs(t, e.conn, 5400)
	before := chSnapshot(t, e.conn)
	if len(before[requestlogview.DayTable]) < 3*3*4 || len(before[requestlogview.HourTable]) < 60 {
		t.Fatalf("the data spans too little: %d day rows, %d hour rows", len(before[requestlogview.DayTable]), len(before[requestlogview.HourTable]))
	}
	var last [2]int64
	res, err := e.replay(context.Background(), func(done, total int64) { last = [2]int64{done, total} })
	if err != nil {
		t.Fatal(err)
	}
	if !res.Swapped || res.Events != 5400 || last[0] != last[1] || last[0] != res.Records {
		t.Fatalf("result %+v, last progress %v", res, last)
	}
	after := chSnapshot(t, e.conn)
	for table, rows := range before {
		sameLines(t, table+" after replay", after[table], rows)
	}
	want := []string{"requestlog_day", "requestlog_day_mv", "requestlog_hour", "requestlog_hour_mv", "requestlog_minute", "requestlog_minute_mv", "requestlog_raw"}
	if got := tables(t, e.conn); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("tables after the swap: %v, want %v", got, want)
	}
	// The swapped-in raw table feeds the swapped-in rollups.
	e.spread(100, now, time.Millisecond)
	testenv.ExactRequestLogs(t, e.conn, 5500)
	for _, r := range rollups {
		sameLines(t, r.table+" after more traffic", rollupSnapshot(t, e.conn, r.table), rollupFromRaw(t, e.conn, r.seconds))
	}
}

func TestReplayWhileTheSinkIngests(t *testing.T) {
	t.Parallel()
	e := newCHEnv(t, 3)
	now := time.Now().UTC()
	e.spread(3000, now.Add(-30*time.Hour), 30*time.Second)
	e.fencedSink()
	testenv.ExactRequestLogs(t, e.conn, 3000)
	// Traffic goes on through the replay and its swap.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				e.spread(40, time.Now(), time.Millisecond)
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	res, err := e.replay(context.Background(), nil)
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	produced := e.seq.Load()
	if res.Events <= 3000 || res.Events >= produced {
		t.Fatalf("replay read %d events of %d: not a replay under traffic", res.Events, produced)
	}
	testenv.ExactRequestLogs(t, e.conn, uint64(produced))
	for _, r := range rollups {
		sameLines(t, r.table, rollupSnapshot(t, e.conn, r.table), rollupFromRaw(t, e.conn, r.seconds))
	}
}

func TestReplayCancelLeavesLiveTables(t *testing.T) {
	t.Parallel()
	e := newCHEnv(t, 2)
	e.spread(3000, time.Now().Add(-3*time.Hour), time.Second)
	e.fencedSink()
	testenv.ExactRequestLogs(t, e.conn, 3000)
	before := chSnapshot(t, e.conn)
	liveTables := tables(t, e.conn)
	ctx, cancel := context.WithCancel(context.Background())
	var sawShadow bool
	_, err := e.replay(ctx, func(done, total int64) {
		if done > 0 && done < total {
			sawShadow = len(tables(t, e.conn)) > len(liveTables)
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || !sawShadow {
		t.Fatalf("replay returned %v (shadow seen: %v), want it cancelled midway", err, sawShadow)
	}
	if got := tables(t, e.conn); strings.Join(got, ",") != strings.Join(liveTables, ",") {
		t.Fatalf("tables after the cancel: %v, want %v", got, liveTables)
	}
	after := chSnapshot(t, e.conn)
	for table, rows := range before {
		sameLines(t, table+" after a cancelled replay", after[table], rows)
	}
	// It can be started again.
	if _, err := e.replay(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	testenv.ExactRequestLogs(t, e.conn, 3000)
}

func TestSecondReplayIsRefused(t *testing.T) {
	t.Parallel()
	e := newCHEnv(t, 1)
	e.spread(2000, time.Now().Add(-time.Hour), time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := make(chan error, 1)
	go func() {
		_, err := e.replay(context.Background(), func(done, _ int64) {
			if done > 0 {
				once.Do(func() { close(started); <-release })
			}
		})
		first <- err
	}()
	select {
	case <-started:
	case err := <-first:
		t.Fatalf("first replay ended before it could be raced: %v", err)
	}
	_, err := e.replay(context.Background(), nil)
	close(release)
	if !errors.Is(err, replay.ErrBusy) || !strings.Contains(err.Error(), "requestlog.clickhouse: another replay of it is running") {
		t.Fatalf("second replay: %v, want replay.ErrBusy", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// Once the first is done the lock is free again.
	if _, err := e.replay(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	testenv.ExactRequestLogs(t, e.conn, 2000)
}

// A partition added to the topic during a replay would be missing from the
// rebuilt tables: the swap refuses, the live tables stay as they were and
// no shadow table is left.
func TestReplayRefusesATopicThatGainedPartitions(t *testing.T) {
	t.Parallel()
	e := newCHEnv(t, 1)
	e.spread(2000, time.Now().Add(-time.Hour), time.Second)
	e.fencedSink()
	testenv.ExactRequestLogs(t, e.conn, 2000)
	before := chSnapshot(t, e.conn)
	liveTables := tables(t, e.conn)
	admin, err := sarama.NewClusterAdmin(e.bus.Brokers, e.bus.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var once sync.Once
	var added error
	_, err = e.replay(context.Background(), func(done, _ int64) {
		if done > 0 {
			once.Do(func() { added = admin.CreatePartitions(e.bus.Topic(kafka.TopicRequestLogs), 2, nil, false) })
		}
	})
	if added != nil {
		t.Fatal(added)
	}
	if err == nil || !strings.Contains(err.Error(), "went from 1 partitions to 2 during the replay; run it again") {
		t.Fatalf("replay across a new partition: %v", err)
	}
	if got := tables(t, e.conn); strings.Join(got, ",") != strings.Join(liveTables, ",") {
		t.Fatalf("tables after the refused swap: %v, want %v", got, liveTables)
	}
	after := chSnapshot(t, e.conn)
	for table, rows := range before {
		sameLines(t, table+" after a refused swap", after[table], rows)
	}
}
