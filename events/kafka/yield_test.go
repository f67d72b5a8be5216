package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
)

// newerOnly: the records only the newer build understands.
func newerOnly(m *sarama.ConsumerMessage) bool {
	v, _ := strconv.Atoi(string(m.Value))
	return v%25 == 7
}

// oldHandler applies what an old build understands: a batch up to the
// first record it does not (per partition), then yields. applied records
// what it stored; held the offsets it yielded at.
func oldHandler(s *store, held *sync.Map) kafka.Handler {
	return func(_ context.Context, b *kafka.Batch) error {
		first := map[int32]*sarama.ConsumerMessage{}
		var ok []*sarama.ConsumerMessage
		for _, m := range b.Messages {
			if first[m.Partition] != nil {
				continue
			}
			if newerOnly(m) {
				first[m.Partition] = m
				continue
			}
			ok = append(ok, m)
		}
		s.add(&kafka.Batch{Messages: ok})
		if len(first) == 0 {
			return nil
		}
		var at []*sarama.ConsumerMessage
		for p, m := range first {
			held.Store(p, m.Offset)
			at = append(at, m)
		}
		return kafka.Yield(&events.ErrNewerSchema{Type: "test.record", Version: 2}, at...)
	}
}

// committed is the group's committed offset of each partition of topic.
func committed(t *testing.T, c kafka.Config, group, topic string) map[int32]int64 {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	res, err := admin.ListConsumerGroupOffsets(group, nil)
	if err != nil {
		return nil // the group is not there yet
	}
	out := map[int32]int64{}
	for p, b := range res.Blocks[c.Topic(topic)] {
		out[p] = b.Offset
	}
	return out
}

// Issue 30 point 2: a member that meets a record its build cannot
// understand applies the records before it and commits up to it, never
// past it, says why in its health, its waiting report and
// cfgd_kafka_consumer_waiting_newer, and leaves the group; it stays held
// there as long as no newer member comes.
func TestConsumeYieldNeverCommitsPastTheHeldRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []kafka.ConsumeOption
	}{
		{"per partition", []kafka.ConsumeOption{kafka.WithBatch(10, 5*time.Millisecond)}},
		{"spanning partitions, commit each", []kafka.ConsumeOption{kafka.WithSpan(), kafka.WithBatch(15, 5*time.Millisecond), kafka.WithCommitEach(), kafka.WithDrain(time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testenv.Kafka(t, 2)
			c.YieldBackoff = 200 * time.Millisecond
			produceN(t, c, "in", 0, 100)
			s := newStore()
			var held sync.Map
			h, waiting := &health{}, &health{}
			reg := prometheus.NewRegistry()
			stop, _ := run(t, c, "g", "in", oldHandler(s, &held), append(tc.opts, kafka.WithHealth(h), kafka.WithWaiting(waiting), kafka.WithMetrics(reg))...)
			heldAt := func() map[int32]int64 {
				out := map[int32]int64{}
				held.Range(func(k, v any) bool { out[k.(int32)] = v.(int64); return true })
				return out
			}
			waitFor(t, "both partitions held", func() bool {
				hs := heldAt()
				cs := committed(t, c, "g", "in")
				return len(hs) == 2 && cs[0] == hs[0] && cs[1] == hs[1]
			})
			// Joining again (every 200ms) and yielding again never moves
			// the offsets past the held records.
			for range 5 {
				time.Sleep(200 * time.Millisecond)
				hs, cs := heldAt(), committed(t, c, "g", "in")
				for p, o := range hs {
					if cs[p] != o {
						t.Fatalf("partition %d committed at %d, held at %d", p, cs[p], o)
					}
				}
			}
			for _, err := range []error{h.last(), waiting.last()} {
				var ns *events.ErrNewerSchema
				if !errors.As(err, &ns) || !strings.Contains(err.Error(), "waiting for a newer cfgd: test.record v2") {
					t.Fatalf("health %v, want the record it waits for", err)
				}
			}
			s.mu.Lock()
			for v := range s.got {
				if n, _ := strconv.Atoi(v); n%25 == 7 {
					t.Errorf("the old build applied %s", v)
				}
			}
			s.mu.Unlock()
			for p := range 2 {
				if v := gauge(t, reg, "cfgd_kafka_consumer_waiting_newer", map[string]string{"group": "g", "topic": c.Topic("in"), "partition": strconv.Itoa(p)}); v != 1 {
					t.Errorf("cfgd_kafka_consumer_waiting_newer of partition %d is %v, want 1", p, v)
				}
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// gauge is the value of the series of name in reg with labels.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// Issue 30 point 2, a rolling upgrade of a group's members: an old member
// yields at each record only a newer build understands, the newer member
// of the same group takes the partition and applies it, and between them
// every record is applied: none skipped, the old one applied none it
// cannot understand.
// With static members (Config.Replica, as serve runs) the coordinator
// drops the yielding member only after its session timeout, and the newer
// one takes over then.
func TestConsumeNewerMemberTakesOverAYieldedPartition(t *testing.T) {
	t.Parallel()
	for _, static := range []bool{false, true} {
		t.Run(fmt.Sprint("static=", static), func(t *testing.T) {
			t.Parallel()
			takeOver(t, static)
		})
	}
}

func takeOver(t *testing.T, static bool) {
	c := testenv.Kafka(t, 2)
	c.YieldBackoff = 300 * time.Millisecond
	if static {
		c.YieldBackoff = 12 * time.Second // past the session timeout
	}
	produceN(t, c, "in", 0, 100)
	old, newer := newStore(), newStore()
	var held sync.Map
	oc, nc := c, c
	if static {
		oc.Replica, nc.Replica = "old", "new"
	}
	stopOld, _ := run(t, oc, "g", "in", oldHandler(old, &held), kafka.WithBatch(10, 5*time.Millisecond))
	waitFor(t, "the old member to hold", func() bool { n := 0; held.Range(func(any, any) bool { n++; return true }); return n > 0 })
	stopNew, _ := run(t, nc, "g", "in", func(_ context.Context, b *kafka.Batch) error { newer.add(b); return nil }, kafka.WithBatch(10, 5*time.Millisecond))
	produceN(t, c, "in", 100, 100)
	all := func() map[string]bool {
		out := map[string]bool{}
		for _, s := range []*store{old, newer} {
			s.mu.Lock()
			for v := range s.got {
				out[v] = true
			}
			s.mu.Unlock()
		}
		return out
	}
	waitFor(t, "every record applied by one member or the other", func() bool { return len(all()) == 200 })
	old.mu.Lock()
	for v := range old.got {
		if n, _ := strconv.Atoi(v); n%25 == 7 {
			t.Errorf("the old member applied %s", v)
		}
	}
	old.mu.Unlock()
	if err := stopOld(); err != nil {
		t.Fatal(err)
	}
	if err := stopNew(); err != nil {
		t.Fatal(err)
	}
}
