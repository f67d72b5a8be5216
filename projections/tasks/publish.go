package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/projections/reactors"
)

// LifecyclePublisher is the reactor's Publisher: a synchronous producer on
// the lifecycle topic, connected on first use (and again after a failure),
// so a broker that is not up yet fails the clear, which is retried, rather
// than serve's start.
type LifecyclePublisher struct {
	bus kafka.Config
	log *slog.Logger

	mu       sync.Mutex
	producer sarama.SyncProducer
}

var _ reactors.Publisher = (*LifecyclePublisher)(nil)

// NewLifecyclePublisher returns a publisher on c's brokers.
func NewLifecyclePublisher(c kafka.Config, log *slog.Logger) *LifecyclePublisher {
	return &LifecyclePublisher{bus: c, log: log}
}

// PublishLifecycle sends recs, keyed by task id like the workers' records,
// and returns once every one is acknowledged.
func (p *LifecyclePublisher) PublishLifecycle(ctx context.Context, recs []tasks.Lifecycle) error {
	if len(recs) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.producer == nil {
		if err := kafka.EnsureTopics(ctx, p.bus, p.log, tasks.TopicLifecycle); err != nil {
			return err
		}
		sp, err := sarama.NewSyncProducer(p.bus.Brokers, p.bus.ProducerSarama())
		if err != nil {
			return fmt.Errorf("lifecycle producer: %w", err)
		}
		p.producer = sp
	}
	topic := p.bus.Topic(tasks.TopicLifecycle)
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("lifecycle record: %w", err)
		}
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(r.TaskID), Value: sarama.ByteEncoder(b)}
	}
	if err := p.producer.SendMessages(msgs); err != nil {
		_ = p.producer.Close()
		p.producer = nil
		return fmt.Errorf("lifecycle records: %w", err)
	}
	return nil
}

// Close stops the producer.
func (p *LifecyclePublisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.producer == nil {
		return nil
	}
	err := p.producer.Close()
	p.producer = nil
	return err
}
