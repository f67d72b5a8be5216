package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
)

type rlEnv struct {
	t    *testing.T
	bus  kafka.Config
	opts *clickhouse.Options
	conn driver.Conn
	prod *requestlogkafka.Producer
}

func newRLEnv(t *testing.T, partitions int) *rlEnv {
	t.Helper()
	c := testenv.Kafka(t, partitions)
	opts, conn := testenv.ClickHouseMigrated(t)
	pc := requestlogkafka.DefaultProducerConfig(c)
	pc.PackEvents = 50
	pc.Timeout = 10 * time.Second
	p, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &rlEnv{t: t, bus: c, opts: opts, conn: conn, prod: p}
}

func (e *rlEnv) produce(n int) {
	e.t.Helper()
	evs := make([]requestlog.Event, n)
	for i := range evs {
		status := requestlog.StatusSuccess
		if i%4 == 0 {
			status = requestlog.StatusError
		}
		evs[i] = requestlog.Event{RequestID: fmt.Sprint(i), ServiceName: "svc.A", MethodName: fmt.Sprintf("M%d", i%3), Status: status,
			DurationMS: int64(i % 100), CreatedAt: time.Now().UTC()}
	}
	for i := 0; i < n; i += 200 {
		if err := e.prod.Produce(context.Background(), evs[i:min(i+200, n)]); err != nil {
			e.t.Fatal(err)
		}
	}
}

// sink starts a sink on conn; stop cancels it and returns Run's error.
func (e *rlEnv) sink(conn driver.Conn, group string, crash func() error) (*RequestLogs, func() error) {
	s, stop, _ := e.sinkDone(conn, group, crash)
	return s, stop
}

// sinkDone is sink that also returns the channel Run's error arrives on.
func (e *rlEnv) sinkDone(conn driver.Conn, group string, crash func() error) (*RequestLogs, func() error, <-chan error) {
	e.t.Helper()
	cfg := DefaultRequestLogConfig(e.bus)
	cfg.Group = group
	cfg.BatchRows = 300
	cfg.BatchWait = 50 * time.Millisecond
	cfg.MaxBackoff = 200 * time.Millisecond
	s, err := NewRequestLogs(cfg, conn, testenv.Quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	s.afterInsert = crash
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	finished := make(chan error, 1)
	var once sync.Once
	var result error
	wait := func() {
		once.Do(func() { result = <-done; finished <- result })
	}
	stop := func() error {
		cancel()
		wait()
		return result
	}
	e.t.Cleanup(func() { _ = stop() })
	go wait()
	return s, stop, finished
}

func TestSinkRedeliveryCountsOnce(t *testing.T) {
	t.Parallel()
	e := newRLEnv(t, 3)
	e.produce(2000)
	first, stop := e.sink(e.conn, "g1", nil)
	testenv.ExactRequestLogs(t, e.conn, 2000)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if first.Stats().Inserted != 2000 {
		t.Fatalf("first sink inserted %d", first.Stats().Inserted)
	}
	// A new group reads the whole topic again: a replay, or every offset
	// commit lost.
	again, _ := e.sink(e.conn, "g2", nil)
	waitFor(t, "the replay to be skipped", func() bool { return again.Stats().Skipped == 2000 })
	testenv.ExactRequestLogs(t, e.conn, 2000)
	if again.Stats().Inserted != 0 {
		t.Fatalf("replay inserted %d rows", again.Stats().Inserted)
	}
}

func TestSinkIDsAreStableAcrossReplay(t *testing.T) {
	t.Parallel()
	e := newRLEnv(t, 2)
	e.produce(700)
	e.sink(e.conn, "g1", nil)
	testenv.ExactRequestLogs(t, e.conn, 700)
	// Rebuild into an empty database from the topic.
	_, other := testenv.ClickHouseMigrated(t)
	e.sink(other, "rebuild", nil)
	testenv.ExactRequestLogs(t, other, 700)
	ids := func(conn driver.Conn) map[uint64]string {
		rs, err := conn.Query(context.Background(), "SELECT id, request_id FROM requestlog_raw")
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		out := map[uint64]string{}
		for rs.Next() {
			var id uint64
			var rid string
			if err := rs.Scan(&id, &rid); err != nil {
				t.Fatal(err)
			}
			out[id] = rid
		}
		return out
	}
	a, b := ids(e.conn), ids(other)
	for id, rid := range a {
		if b[id] != rid {
			t.Fatalf("id %d is request %q before the replay and %q after", id, rid, b[id])
		}
	}
}

func TestSinkCrashBetweenInsertAndCommit(t *testing.T) {
	t.Parallel()
	e := newRLEnv(t, 2)
	e.produce(1500)
	crash := errors.New("crash after insert")
	crashed, _, done := e.sinkDone(e.conn, "g", func() error { return crash })
	select {
	case err := <-done:
		if !errors.Is(err, crash) {
			t.Fatalf("sink returned %v, want the crash", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("sink never crashed")
	}
	insertedBefore := crashed.Stats().Inserted
	raw, _, _, _ := testenv.RequestLogCounts(t, e.conn)
	if raw == 0 || raw != uint64(insertedBefore) {
		t.Fatalf("after the crash ClickHouse holds %d rows, the sink inserted %d", raw, insertedBefore)
	}
	// The restarted sink gets the uncommitted batch again and skips it.
	again, _ := e.sink(e.conn, "g", nil)
	testenv.ExactRequestLogs(t, e.conn, 1500)
	if again.Stats().Skipped < insertedBefore {
		t.Fatalf("restarted sink skipped %d rows, want at least the %d inserted before the crash", again.Stats().Skipped, insertedBefore)
	}
}

func TestSinkPoisonGoesToDeadLetters(t *testing.T) {
	t.Parallel()
	e := newRLEnv(t, 1)
	e.produce(100)
	raw, err := kafka.NewProducer(e.bus, kafka.ProducerOptions{}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	bad := requestlog.AppendBatch(nil, []requestlog.Event{{ServiceName: "", MethodName: "m", Status: "nope"}})
	for _, v := range [][]byte{[]byte("not a batch"), bad} {
		if err := raw.Send(context.Background(), &sarama.ProducerMessage{Topic: e.prod.Topic(), Value: sarama.ByteEncoder(v)}); err != nil {
			t.Fatal(err)
		}
	}
	e.produce(100) // after the poison, on the same (only) partition
	s, _ := e.sink(e.conn, "g", nil)
	testenv.ExactRequestLogs(t, e.conn, 200)
	dead := testenv.ReadTopic(t, e.bus, e.bus.Topic(kafka.TopicRequestLogsDead), 2, 30*time.Second)
	if len(dead) != 2 || s.Stats().Poisoned != 2 {
		t.Fatalf("dead letters %d, poisoned %d; want 2", len(dead), s.Stats().Poisoned)
	}
	if string(dead[0].Value) != "not a batch" {
		t.Fatalf("dead letter holds %q", dead[0].Value)
	}
}

// proxy forwards TCP to ClickHouse and can refuse it, so a test takes
// ClickHouse "down" without stopping the server other tests share.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close(); p.setDown(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.down {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
	return p
}

func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

func TestSinkPausesWhileClickHouseIsDown(t *testing.T) {
	t.Parallel()
	e := newRLEnv(t, 2)
	px := startProxy(t, e.opts.Addr[0])
	viaProxy := *e.opts
	viaProxy.Addr = []string{px.ln.Addr().String()}
	viaProxy.DialTimeout = time.Second
	viaProxy.ReadTimeout = 5 * time.Second
	conn, err := clickhouse.Open(&viaProxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e.produce(500)
	s, _ := e.sink(conn, "g", nil)
	testenv.ExactRequestLogs(t, e.conn, 500)
	if err := s.Ready(context.Background()); err != nil {
		t.Fatalf("ready while up: %v", err)
	}
	px.setDown(true)
	e.produce(800)
	waitFor(t, "readiness to report ClickHouse down", func() bool { return s.Ready(context.Background()) != nil })
	raw, _, _, _ := testenv.RequestLogCounts(t, e.conn)
	if raw != 500 {
		t.Fatalf("rows changed to %d while ClickHouse was unreachable", raw)
	}
	px.setDown(false)
	testenv.ExactRequestLogs(t, e.conn, 1300)
	waitFor(t, "readiness to recover", func() bool { return s.Ready(context.Background()) == nil })
}
