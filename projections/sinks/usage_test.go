package sinks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/kafka"
)

type env struct {
	t    *testing.T
	bus  kafka.Config
	pool *pgxpool.Pool
	rec  *apikey.UsageRecorder
}

func newEnv(t *testing.T, partitions int) *env {
	t.Helper()
	c := testenv.Kafka(t, partitions)
	rc := apikey.DefaultUsageRecorderConfig(c)
	rc.Timeout = 10 * time.Second
	r, err := apikey.NewUsageRecorder(rc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return &env{t: t, bus: c, pool: testenv.Postgres(t), rec: r}
}

// keys inserts read-model rows for ids (as the apikey projection would).
func (e *env) keys(ids ...int64) {
	e.t.Helper()
	for _, id := range ids {
		if _, err := e.pool.Exec(context.Background(), `INSERT INTO api_keys (id, name, key_type, key_hash, masked_key, user_id, user_email, created_at, created_by)
			VALUES ($1, $2, 'service', $3, 'cfgd...abcd', 1, 'a@example.com', now(), 'test')`, id, fmt.Sprint("k", id), fmt.Sprint("hash", id)); err != nil {
			e.t.Fatal(err)
		}
	}
}

// produce records the uses through the recorder, flushing every 20 so
// they spread over many records and partitions.
func (e *env) produce(uses []apikey.Use) {
	e.t.Helper()
	for i, x := range uses {
		e.rec.Record(x.KeyID, x.LastUsed)
		if i%20 == 19 || i == len(uses)-1 {
			if err := e.rec.Flush(context.Background()); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// start runs a consumer in group; stop cancels it and returns Run's error.
func (e *env) start(group string, crash func() error) (*Usage, func() error, <-chan error) {
	e.t.Helper()
	cfg := DefaultUsageConfig(e.bus)
	cfg.Group = group
	cfg.BatchRecords = 7
	cfg.BatchWait = 50 * time.Millisecond
	cfg.MaxBackoff = 200 * time.Millisecond
	u, err := NewUsage(cfg, e.pool, testenv.Quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	u.afterApply = crash
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	finished := make(chan error, 1)
	var once sync.Once
	var result error
	wait := func() { once.Do(func() { result = <-done; finished <- result }) }
	stop := func() error { cancel(); wait(); return result }
	e.t.Cleanup(func() { _ = stop() })
	go wait()
	return u, stop, finished
}

type usage struct {
	count int64
	last  *time.Time
}

func (e *env) usage() map[int64]usage {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT id, request_count, last_used_at FROM api_keys`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]usage{}
	for rows.Next() {
		var id int64
		var u usage
		if err := rows.Scan(&id, &u.count, &u.last); err != nil {
			e.t.Fatal(err)
		}
		out[id] = u
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// waitFor polls cond until it holds or 60s pass (a loaded machine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var base = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// traffic is n uses spread over keys 1, 2 and 3; it returns the expected
// count and newest use per key.
func traffic(n int) ([]apikey.Use, map[int64]usage) {
	uses := make([]apikey.Use, n)
	want := map[int64]usage{1: {}, 2: {}, 3: {}}
	for i := range uses {
		// Timestamps are not in produce order: the newest is not the last.
		at := base.Add(time.Duration((i*7919)%n) * time.Second)
		key := int64(i%3) + 1
		uses[i] = apikey.Use{KeyID: key, Requests: 1, LastUsed: at}
		u := want[key]
		u.count++
		if u.last == nil || at.After(*u.last) {
			u.last = &at
		}
		want[key] = u
	}
	return uses, want
}

func (e *env) exact(want map[int64]usage) {
	e.t.Helper()
	var got map[int64]usage
	waitFor(e.t, "the usage to be applied", func() bool {
		got = e.usage()
		var total, wantTotal int64
		for id := range want {
			total += got[id].count
			wantTotal += want[id].count
		}
		return total >= wantTotal
	})
	time.Sleep(300 * time.Millisecond) // let a double count show, if any
	got = e.usage()
	for id, w := range want {
		g := got[id]
		if g.count != w.count || (g.last == nil) != (w.last == nil) || (g.last != nil && !g.last.Equal(*w.last)) {
			e.t.Errorf("key %d: count %d, last used %v; want %d, %v", id, g.count, g.last, w.count, w.last)
		}
	}
}

// seen is how many requests u has read.
func seen(u *Usage) int64 { s := u.Stats(); return s.Applied + s.Skipped }

func TestUsageCountsOnceUnderRedelivery(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// redeliver runs a first consumer over the topic, then makes the
		// same records arrive again at a second one, which returns.
		redeliver func(t *testing.T, e *env, total int) *Usage
	}{
		{"a new group rereads the whole topic", func(t *testing.T, e *env, total int) *Usage {
			first, stop, _ := e.start("g1", nil)
			waitFor(t, "the first pass", func() bool { return first.Stats().Applied == int64(total) })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			again, _, _ := e.start("g2", nil)
			waitFor(t, "the reread", func() bool { return seen(again) == int64(total) })
			return again
		}},
		{"a crash between the Postgres commit and the offset commit", func(t *testing.T, e *env, total int) *Usage {
			crash := errors.New("crash")
			_, _, done := e.start("g1", func() error { return crash })
			if err := <-done; !errors.Is(err, crash) {
				t.Fatalf("first consumer: %v", err)
			}
			// Nothing was committed to Kafka: the same group gets every
			// event again, including what the crashed consumer applied.
			again, _, _ := e.start("g1", nil)
			waitFor(t, "every event to be redelivered", func() bool { return seen(again) == int64(total) })
			return again
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 3)
			e.keys(1, 2, 3, 4)
			uses, want := traffic(600)
			e.produce(uses)
			tc.redeliver(t, e, len(uses))
			want[4] = usage{} // never used: 0 and null
			e.exact(want)
		})
	}
}

func TestUsageIgnoresUnknownKeysAndUnreadableRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.keys(5)
	at := base.Add(time.Hour)
	// A record that is no usage record is skipped, and stalls nothing.
	p, err := kafka.NewProducer(e.bus, kafka.ProducerOptions{Topics: []string{kafka.TopicAPIKeyUsage}}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if err := p.Send(context.Background(), &sarama.ProducerMessage{Topic: e.bus.Topic(kafka.TopicAPIKeyUsage), Value: sarama.StringEncoder("not uses")}); err != nil {
		t.Fatal(err)
	}
	e.produce([]apikey.Use{
		{KeyID: 5, LastUsed: at},
		// A key the read model does not know (deleted) changes nothing
		// and stalls nothing.
		{KeyID: 999, LastUsed: at},
		{KeyID: 5, LastUsed: base},
	})
	u, _, _ := e.start("g", nil)
	waitFor(t, "the records", func() bool { s := u.Stats(); return s.Applied == 3 && s.Poisoned == 1 })
	e.exact(map[int64]usage{5: {count: 2, last: &at}})
}

func TestConfigValidateJoinsProblems(t *testing.T) {
	t.Parallel()
	c := UsageConfig{BatchRecords: 0}
	err := c.Validate()
	if err == nil {
		t.Fatal("empty config accepted")
	}
	for _, want := range []string{"Group", "Name", "BatchRecords", "BatchWait", "MaxBackoff"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if err := DefaultUsageConfig(kafka.Config{Brokers: []string{"127.0.0.1:9092"}, Partitions: 1}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// Issue #20 point 4, API-key usage: after the usage topic is deleted and
// created again its offsets start over at 0; the consumer notices the new
// topic id, says so (log, stats, Ready), and counts the new topic's
// records instead of skipping them as already held.
func TestUsageContinuesOnARecreatedTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.keys(7)
	ctx := context.Background()
	at := base.Add(time.Hour)
	uses := func(n int, when time.Time) []apikey.Use {
		out := make([]apikey.Use, n)
		for i := range out {
			out[i] = apikey.Use{KeyID: 7, Requests: 1, LastUsed: when}
		}
		return out
	}
	u, _, _ := e.start("g", nil)
	e.produce(uses(60, at))
	e.exact(map[int64]usage{7: {count: 60, last: &at}})

	admin, err := sarama.NewClusterAdmin(e.bus.Brokers, e.bus.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteTopic(e.bus.Topic(kafka.TopicAPIKeyUsage)); err != nil {
		t.Fatal(err)
	}
	if err := kafka.EnsureTopics(ctx, e.bus, testenv.Quiet(), kafka.TopicAPIKeyUsage); err != nil {
		t.Fatal(err)
	}
	// A new recorder: the idempotent producer's sequence numbers belong
	// to the deleted topic.
	rc := apikey.DefaultUsageRecorderConfig(e.bus)
	rc.Timeout = 10 * time.Second
	if e.rec, err = apikey.NewUsageRecorder(rc, testenv.Quiet()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.rec.Close() })
	later := at.Add(time.Hour)
	// Fewer records than the old topic held: by offset alone every one
	// would look applied already.
	e.produce(uses(20, later))
	e.exact(map[int64]usage{7: {count: 80, last: &later}})
	if st := u.Stats(); st.TopicRecreated != 1 {
		t.Fatalf("stats %+v: want the recreated topic noticed once", st)
	}
}
