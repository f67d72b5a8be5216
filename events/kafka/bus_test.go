package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
)

func TestEnsureTopicsUsesConfiguredPartitions(t *testing.T) {
	t.Parallel()
	c := testenv.Kafka(t, 6)
	ctx := context.Background()
	for range 2 { // the second call finds the topic and leaves it alone
		if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), kafka.TopicEvents); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	md, err := admin.DescribeTopics([]string{c.Topic(kafka.TopicEvents)})
	if err != nil || len(md) != 1 {
		t.Fatal(err)
	}
	if got := len(md[0].Partitions); got != 6 {
		t.Fatalf("partitions = %d, want 6", got)
	}
}

// Records written to the embedded broker survive a restart from its data
// directory, at the same address.
func TestEmbeddedBrokerKeepsDataAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := kafka.StartEmbedded(dir, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := first.Addr()
	c := kafka.Config{Brokers: []string{addr}, Partitions: 2, TopicPrefix: "persist.", SASL: first.SASL()}
	if err := kafka.EnsureTopics(context.Background(), c, testenv.Quiet(), kafka.TopicEvents); err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		m := message.NewMessage(string(rune('a'+i)), []byte("payload"))
		m.Metadata.Set("stream", "s")
		if err := pub.Publish(c.Topic(kafka.TopicEvents), m); err != nil {
			t.Fatal(err)
		}
	}
	_ = pub.Close()
	first.Close()

	second, err := kafka.StartEmbedded(dir, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	got := testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), 10, 20*time.Second)
	if len(got) != 10 {
		t.Fatalf("read %d records after restart, want 10", len(got))
	}
	for _, m := range got {
		if string(m.Key) != "s" {
			t.Fatalf("key %q, want the stream id", m.Key)
		}
	}
}

func TestPingFailsFastWhenNoBroker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := kafka.Ping(ctx, kafka.Config{Brokers: []string{"127.0.0.1:1"}}); err == nil {
		t.Fatal("want an error")
	}
	if time.Since(start) > 3*time.Second {
		t.Fatal("ping ignored its deadline")
	}
}

// One data directory, one broker: a second broker on it (two `cfgd
// broker`s, or a `serve` that forgot KAFKA__BROKERS) is refused with the
// reason instead of writing the same log; once the first stops, the
// directory is free again.
func TestEmbeddedBrokerOwnsItsDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := kafka.StartEmbedded(dir, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	second, err := kafka.StartEmbedded(dir, "127.0.0.1:0")
	if err == nil {
		second.Close()
		first.Close()
		t.Fatal("a second broker started on the data directory of a running one")
	}
	if !strings.Contains(err.Error(), "in use by another broker") {
		t.Errorf("second broker: %v", err)
	}
	first.Close()
	again, err := kafka.StartEmbedded(dir, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	again.Close()
}
