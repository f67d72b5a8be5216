package sinks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/signing"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections/projectors"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
)

// cutoverSink is one sink and its replay under the signing cut-over;
// records are told apart by a small id.
type cutoverSink struct {
	pool  *pgxpool.Pool // the sink's database, which keeps the watermarks
	topic string
	value func(id int) []byte
	// live runs the live sink with cut until stop; ready is its
	// readiness check.
	live func(t *testing.T, cut *signing.Cutover) (stop func(), ready func(context.Context) error)
	// held is the set of ids the live (or swapped-in) tables hold.
	held func(t *testing.T) []int
	// replay rebuilds the tables from the topic with cut.
	replay func(t *testing.T, cut *signing.Cutover) error
}

var sinkKinds = map[string]func(t *testing.T, c kafka.Config, signer *events.Signer) cutoverSink{
	"lifecycle": lifecycleCutover, "usage": usageCutover, "requestlog": requestLogCutover,
}

// Issue 30 point 3: each sink, live and in its replay, takes a record
// without a signature only below the watermark recorded at the first start
// of a signing build: never above it, on a partition added later, or on the
// topic deleted and created again (at offsets below the old watermark).
//
//	id 1: unsigned, partition 0, before the first start  -> stored
//	id 2: signed, partition 1 (added after the start)     -> stored
//	id 3: unsigned, partition 0, after the start          -> refused
//	id 4: unsigned, partition 1 (added after the start)   -> refused
//	id 5: unsigned, partition 0 of the recreated topic    -> refused
//	id 6: signed, partition 0 of the recreated topic      -> stored
func TestSinksAcceptUnsignedOnlyBelowTheWatermark(t *testing.T) {
	t.Parallel()
	for name, mk := range sinkKinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := testenv.Kafka(t, 1)
			signer := testenv.Signer(t)
			s := mk(t, c, signer)
			if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), s.topic, kafka.TopicDeadLetters, kafka.TopicRequestLogsDead); err != nil {
				t.Fatal(err)
			}
			send := func(id int, p int32, signed bool) {
				t.Helper()
				var by *events.Signer
				if signed {
					by = signer
				}
				rawSend(t, c, s.topic, p, s.value(id), by, 1)
			}
			expect := func(what string, want ...int) {
				t.Helper()
				deadline := time.Now().Add(30 * time.Second)
				for !slices.Equal(s.held(t), want) {
					if time.Now().After(deadline) {
						t.Fatalf("%s: the tables hold %v, want %v", what, s.held(t), want)
					}
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(300 * time.Millisecond) // what should stay out, if it were to come
				if got := s.held(t); !slices.Equal(got, want) {
					t.Fatalf("%s: the tables hold %v, want %v", what, got, want)
				}
			}
			cut := func() *signing.Cutover { return signing.New(s.pool, c, s.topic, testenv.Quiet()) }

			send(1, 0, false)
			stop, _ := s.live(t, cut()) // the first start of a signing build
			expect("first start", 1)
			stop()
			admin, err := sarama.NewClusterAdmin(c.Brokers, c.Sarama())
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			if err := admin.CreatePartitions(c.Topic(s.topic), 2, nil, false); err != nil {
				t.Fatal(err)
			}
			send(3, 0, false)
			send(4, 1, false)
			send(2, 1, true)
			stop, _ = s.live(t, cut())
			expect("live, after the start", 1, 2)
			stop()
			if err := s.replay(t, cut()); err != nil {
				t.Fatal(err)
			}
			expect("replayed", 1, 2)

			if err := admin.DeleteTopic(c.Topic(s.topic)); err != nil {
				t.Fatal(err)
			}
			if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), s.topic); err != nil {
				t.Fatal(err)
			}
			// As many partitions as the old topic had at the end.
			if err := admin.CreatePartitions(c.Topic(s.topic), 2, nil, false); err != nil {
				t.Fatal(err)
			}
			send(5, 0, false) // offset 0: below the old topic's watermark
			send(6, 0, true)
			stop, _ = s.live(t, cut())
			expect("live, recreated topic", 1, 2, 6)
			stop()
			if err := s.replay(t, cut()); err != nil {
				t.Fatal(err)
			}
			expect("replayed, recreated topic", 6)
		})
	}
}

// rawSend writes value to partition p of c's topic, signed by s (nil:
// unsigned, as a cfgd before signed bus records wrote it), with schema
// version header version.
func rawSend(t *testing.T, c kafka.Config, topic string, p int32, value []byte, s *events.Signer, version int) {
	t.Helper()
	sc := c.Sarama()
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer(c.Brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	m := &sarama.ProducerMessage{Topic: c.Topic(topic), Partition: p, Value: sarama.ByteEncoder(value), Headers: kafka.SchemaHeaders(version)}
	if s != nil {
		m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(events.HeaderSignature), Value: []byte(s.Sign(value))})
	}
	if _, _, err := prod.SendMessage(m); err != nil {
		t.Fatal(err)
	}
}

// running runs fn until stop.
func running(t *testing.T, fn func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sink: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func lifecycleCutover(t *testing.T, c kafka.Config, signer *events.Signer) cutoverSink {
	pool := testenv.Postgres(t)
	reg, err := events.NewRegistry(tasks.Events()...)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	return cutoverSink{pool: pool, topic: tasks.TopicLifecycle,
		value: func(id int) []byte {
			b, _ := json.Marshal(tasks.Lifecycle{TaskID: fmt.Sprint(id), Queue: "default", Type: "demo:echo", Step: tasks.StepSucceeded, Attempt: 1, At: at})
			return b
		},
		live: func(t *testing.T, cut *signing.Cutover) (func(), func(context.Context) error) {
			s := sinks.NewLifecycle(pool, c, signer, testenv.Quiet())
			s.MaxWait = 20 * time.Millisecond
			s.Cutover = cut
			return running(t, s.Run), s.Ready
		},
		held: func(t *testing.T) []int {
			return idsOf(t, pool, `SELECT task_id::int FROM task_runs ORDER BY 1`)
		},
		replay: func(t *testing.T, cut *signing.Cutover) error {
			_, err := replay.Run(context.Background(), pool, reg, sinks.ViewsWithLifecycle(c, signer, cut, testenv.Quiet()), replay.Config{}, nil)
			return err
		},
	}
}

// usageCutover: record id counts 1<<id uses of one key, so the key's
// count says which records were counted.
func usageCutover(t *testing.T, c kafka.Config, signer *events.Signer) cutoverSink {
	u := startUsage(t)
	u.bus = c
	key := u.keys[0]
	config := func(cut *signing.Cutover) sinks.UsageConfig {
		cfg := u.config()
		cfg.Signer, cfg.Cutover = signer, cut
		return cfg
	}
	return cutoverSink{pool: u.Pool, topic: kafka.TopicAPIKeyUsage,
		value: func(id int) []byte {
			return apikey.AppendUses(nil, []apikey.Use{{KeyID: key, Requests: 1 << id, LastUsed: time.Now().UTC()}})
		},
		live: func(t *testing.T, cut *signing.Cutover) (func(), func(context.Context) error) {
			s, err := sinks.NewUsage(config(cut), u.Pool, testenv.Quiet())
			if err != nil {
				t.Fatal(err)
			}
			return running(t, s.Run), s.Ready
		},
		held: func(t *testing.T) []int {
			var n int64
			if err := u.Pool.QueryRow(context.Background(), `SELECT request_count FROM api_keys WHERE id = $1`, key).Scan(&n); err != nil {
				t.Fatal(err)
			}
			var ids []int
			for id := range 62 {
				if n&(1<<id) != 0 {
					ids = append(ids, id)
				}
			}
			return ids
		},
		replay: func(t *testing.T, cut *signing.Cutover) error {
			f, err := sinks.NewUsageFeed(config(cut), testenv.Quiet())
			if err != nil {
				t.Fatal(err)
			}
			p := projectors.Keys()
			p.Feeds = append(p.Feeds, f)
			_, err = replay.Run(context.Background(), u.Pool, registry(t), p, replay.Config{}, nil)
			return err
		},
	}
}

func requestLogCutover(t *testing.T, c kafka.Config, signer *events.Signer) cutoverSink {
	pool := testenv.Postgres(t)
	_, conn := testenv.ClickHouseMigrated(t)
	return cutoverSink{pool: pool, topic: kafka.TopicRequestLogs,
		value: func(id int) []byte {
			return requestlog.AppendBatch(nil, []requestlog.Event{{RequestID: fmt.Sprint(id), ServiceName: "svc.A", MethodName: "M",
				Status: requestlog.StatusSuccess, CreatedAt: time.Now().UTC()}})
		},
		live: func(t *testing.T, cut *signing.Cutover) (func(), func(context.Context) error) {
			cfg := sinks.DefaultRequestLogConfig(c)
			cfg.BatchWait = 20 * time.Millisecond
			cfg.MaxBackoff = 200 * time.Millisecond
			cfg.Signer, cfg.Cutover = signer, cut
			s, err := sinks.NewFencedRequestLogs(cfg, conn, sinks.PostgresFence{Pool: pool}, testenv.Quiet())
			if err != nil {
				t.Fatal(err)
			}
			return running(t, s.Run), s.Ready
		},
		held: func(t *testing.T) []int {
			rows, err := conn.Query(context.Background(), `SELECT DISTINCT toInt64(request_id) FROM requestlog_raw ORDER BY 1`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var ids []int
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, int(id))
			}
			slices.Sort(ids)
			return ids
		},
		replay: func(t *testing.T, cut *signing.Cutover) error {
			cfg := replay.DefaultClickHouseConfig(c)
			// After the topic was created again the live tables hold rows
			// of records it no longer has.
			cfg.AllowPartial = true
			target, err := replay.NewClickHouse(cfg, conn, pool, sinks.RequestLogCodec{Signer: signer, Cutover: cut})
			if err != nil {
				t.Fatal(err)
			}
			_, err = replay.Rebuild(context.Background(), pool, target, nil)
			return err
		},
	}
}

func idsOf(t *testing.T, pool *pgxpool.Pool, q string) []int {
	t.Helper()
	rows, err := pool.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []int
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// Issue 30 point 2: a sink that meets a record of a format newer than its
// build's neither stores it, nor dead-letters it, nor moves past it: it
// stores what came before, holds the partition (its readiness says what it
// waits for), and leaves the group for a newer replica; a replay refuses
// to rebuild without the record.
func TestSinksHoldARecordOfANewerFormat(t *testing.T) {
	t.Parallel()
	for name, mk := range sinkKinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := testenv.Kafka(t, 1)
			c.YieldBackoff = 300 * time.Millisecond
			signer := testenv.Signer(t)
			s := mk(t, c, signer)
			if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), s.topic, kafka.TopicDeadLetters, kafka.TopicRequestLogsDead); err != nil {
				t.Fatal(err)
			}
			rawSend(t, c, s.topic, 0, s.value(1), signer, 1)
			rawSend(t, c, s.topic, 0, s.value(2), signer, 2) // a newer build's format
			rawSend(t, c, s.topic, 0, s.value(3), signer, 1)
			_, ready := s.live(t, nil)
			deadline := time.Now().Add(30 * time.Second)
			for {
				err := ready(ctx)
				if err != nil && strings.Contains(err.Error(), "waiting for a newer cfgd: ") && strings.HasSuffix(err.Error(), " v2") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("ready: %v, want it waiting for a newer cfgd", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(time.Second) // it comes back every 300ms: still held
			if got := s.held(t); !slices.Equal(got, []int{1}) {
				t.Fatalf("the tables hold %v, want [1]: the records from the newer one on wait", got)
			}
			for _, topic := range []string{kafka.TopicDeadLetters, kafka.TopicRequestLogsDead} {
				if dls, err := kafka.ReadDeadLetters(ctx, c, topic); err != nil || len(dls) != 0 {
					t.Fatalf("dead letters %v (%v), want none", dls, err)
				}
			}
			if err := s.replay(t, nil); err == nil || !strings.Contains(err.Error(), "waiting for a newer cfgd") {
				t.Fatalf("replay: %v, want it refused for the newer record", err)
			}
		})
	}
}
