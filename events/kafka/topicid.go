package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// ErrNoTopicID is TopicID's answer from brokers that give topics no id
// (before Kafka 2.8).
var ErrNoTopicID = errors.New("the brokers give topics no id")

// TopicID returns the id the brokers gave topic (c.Topic(name)) when it
// was created (KIP-516). A topic deleted and created again under the same
// name gets a new id, and its offsets start over from 0: a store that
// keeps the offsets it applied records the id beside them, and compares
// it with this one before trusting them (the request-log sink does, and
// says so in its log, stats and readiness when they differ).
func TopicID(ctx context.Context, c Config, name string) (string, error) {
	topic := c.Topic(name)
	sc := c.Sarama()
	client, err := sarama.NewClient(c.Brokers, sc)
	if err != nil {
		return "", fmt.Errorf("kafka: %w", err)
	}
	defer client.Close()
	b, err := client.Controller()
	if err != nil {
		return "", fmt.Errorf("kafka controller: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	md, err := b.GetMetadata(sarama.NewMetadataRequest(sc.Version, []string{topic}))
	if err != nil {
		return "", fmt.Errorf("kafka metadata of %s: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if !errors.Is(t.Err, sarama.ErrNoError) {
			return "", fmt.Errorf("kafka metadata of %s: %w", topic, t.Err)
		}
		if t.Uuid == (sarama.Uuid{}) {
			return "", ErrNoTopicID
		}
		return t.Uuid.String(), nil
	}
	return "", fmt.Errorf("kafka metadata of %s: %w", topic, sarama.ErrUnknownTopicOrPartition)
}
