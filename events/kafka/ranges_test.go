package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
)

// Reader.Read hands over exactly the records in [from, to) of each
// partition, in offset order and batches, and says where it stopped;
// Backlog counts the same records.
func TestReadPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.Kafka(t, 2)
	if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), "feed"); err != nil {
		t.Fatal(err)
	}
	topic := c.Topic("feed")
	// A producer that picks partitions (cfgd's own never does).
	sc := c.Sarama()
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer(c.Brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for p, n := range []int{7, 3} {
		for i := range n {
			if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: int32(p), Value: sarama.StringEncoder(fmt.Sprint(p, "-", i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	r, err := kafka.NewReader(c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ends, err := r.Ends(topic)
	if err != nil || ends[0] != 7 || ends[1] != 3 {
		t.Fatalf("ends %v %v", ends, err)
	}
	for _, tc := range []struct {
		name     string
		from, to map[int32]int64
		want     string // the batches
		backlog  int64
		next     map[int32]int64
	}{
		{"all", nil, ends, "0:[0-0 0-1 0-2] 0:[0-3 0-4 0-5] 0:[0-6] 1:[1-0 1-1 1-2] ", 10, map[int32]int64{0: 7, 1: 3}},
		{"middle", map[int32]int64{0: 2, 1: 3}, map[int32]int64{0: 5, 1: 3}, "0:[0-2 0-3 0-4] ", 3, map[int32]int64{0: 5, 1: 3}},
		{"past the end", map[int32]int64{0: 6}, map[int32]int64{0: 100}, "0:[0-6] ", 1, map[int32]int64{0: 7}},
	} {
		for _, read := range []struct {
			name string
			fn   func(context.Context, string, map[int32]int64, map[int32]int64, int, func(context.Context, int32, []*sarama.ConsumerMessage) error) (map[int32]int64, error)
		}{{"Read", r.Read}, {"ReadConcurrently", r.ReadConcurrently}} {
			t.Run(tc.name+"/"+read.name, func(t *testing.T) {
				n, err := r.Backlog(topic, tc.from, tc.to)
				if err != nil || n != tc.backlog {
					t.Fatalf("backlog %d %v, want %d", n, err, tc.backlog)
				}
				// A read that waits for records that never come fails here.
				ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				var mu sync.Mutex
				got := map[int32]string{}
				next, err := read.fn(ctx, topic, tc.from, tc.to, 3, func(_ context.Context, p int32, msgs []*sarama.ConsumerMessage) error {
					vals := make([]string, len(msgs))
					for i, m := range msgs {
						vals[i] = string(m.Value)
					}
					mu.Lock()
					defer mu.Unlock()
					got[p] += fmt.Sprintf("%d:%v ", p, vals)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if all := got[0] + got[1]; all != tc.want {
					t.Fatalf("read %q, want %q", all, tc.want)
				}
				if fmt.Sprint(next) != fmt.Sprint(tc.next) {
					t.Fatalf("next %v, want %v", next, tc.next)
				}
			})
		}
	}
}

// ReadConcurrently stops every partition at the first error and returns
// it, not the cancellation it caused.
func TestReadConcurrentlyStopsAtTheFirstError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.Kafka(t, 4)
	if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), "feed"); err != nil {
		t.Fatal(err)
	}
	topic := c.Topic("feed")
	prod, err := kafka.NewProducer(c, kafka.ProducerOptions{}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range 40 {
		if err := prod.Send(ctx, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprint(i)), Value: sarama.StringEncoder("x")}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := kafka.NewReader(c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ends, err := r.Ends(topic)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = r.ReadConcurrently(ctx, topic, nil, ends, 1, func(ctx context.Context, p int32, _ []*sarama.ConsumerMessage) error {
		if p == 0 {
			return boom
		}
		<-ctx.Done() // the other partitions wait to be stopped
		return ctx.Err()
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
}

// A topic whose first records retention deleted is refused: a rebuild
// from it would lose what they counted.
func TestCompleteRefusesATruncatedTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.Kafka(t, 2)
	if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), "feed"); err != nil {
		t.Fatal(err)
	}
	topic := c.Topic("feed")
	prod, err := kafka.NewProducer(c, kafka.ProducerOptions{}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range 6 {
		if err := prod.Send(ctx, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprint(i)), Value: sarama.StringEncoder("x")}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := kafka.NewReader(c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Complete(topic); err != nil {
		t.Fatalf("a whole topic: %v", err)
	}
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ends, err := r.Ends(topic)
	if err != nil {
		t.Fatal(err)
	}
	var p int32 = -1
	for q, end := range ends {
		if end > 0 {
			p = q
		}
	}
	if err := admin.DeleteRecords(topic, map[int32]int64{p: 1}); err != nil {
		t.Fatal(err)
	}
	if err := r.Complete(topic); !errors.Is(err, kafka.ErrTruncated) {
		t.Fatalf("a topic without its first record: %v", err)
	}
}
