package kafka_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
)

func TestTopicIDChangesWhenRecreated(t *testing.T) {
	ctx := context.Background()
	c := testenv.Kafka(t, 2)
	if err := kafka.EnsureTopics(ctx, c, slog.New(slog.DiscardHandler), kafka.TopicRequestLogs); err != nil {
		t.Fatal(err)
	}
	first, err := kafka.TopicID(ctx, c, kafka.TopicRequestLogs)
	if err != nil || first == "" {
		t.Fatal(first, err)
	}
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteTopic(c.Topic(kafka.TopicRequestLogs)); err != nil {
		t.Fatal(err)
	}
	if err := kafka.EnsureTopics(ctx, c, slog.New(slog.DiscardHandler), kafka.TopicRequestLogs); err != nil {
		t.Fatal(err)
	}
	again, err := kafka.TopicID(ctx, c, kafka.TopicRequestLogs)
	if err != nil || again == first {
		t.Fatalf("id %s before, %s after (%v)", first, again, err)
	}
}
