package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
)

// Producer is the one producer of lifecycle records, keyed by task id so
// one task's records stay in order. Enqueued and started records are
// Emitted without waiting; an attempt's outcome is Published and waited
// for before asynq hears of it, so a worker killed meanwhile leaves the
// task to asynq's lease recovery rather than a lost record; the
// tasks.control reactor Publishes a clear's records and waits too. It
// connects on first use, so a broker that is not up yet fails a Publish
// rather than the process start.
//
// Each record carries the signature header of domain events
// (events.HeaderSignature, an HMAC of the body under the event signing
// key): the lifecycle sink refuses a record without it, so a broker login
// alone cannot forge counted tasks.
type Producer struct {
	p      *kafka.Producer
	topic  string
	signer *events.Signer
	log    *slog.Logger
}

// publishTimeout bounds one Publish; records still in flight then may be
// stored later, which the lifecycle sink applies harmlessly.
const publishTimeout = 10 * time.Second

// NewProducer returns a producer on c's brokers that signs with signer.
func NewProducer(c kafka.Config, signer *events.Signer, log *slog.Logger) (*Producer, error) {
	if signer == nil {
		return nil, errors.New("lifecycle producer: a signer is required")
	}
	// Ride out a broker restart of about a minute: an emitted record
	// given up is a task the statistics never see. Records wait in memory
	// meanwhile.
	p, err := kafka.NewProducer(c, kafka.ProducerOptions{Retries: 120, RetryBackoff: 500 * time.Millisecond, Topics: []string{TopicLifecycle}}, log)
	if err != nil {
		return nil, fmt.Errorf("lifecycle producer: %w", err)
	}
	return &Producer{p: p, topic: c.Topic(TopicLifecycle), signer: signer, log: log}, nil
}

func (p *Producer) message(rec Lifecycle) (*sarama.ProducerMessage, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("lifecycle record: %w", err)
	}
	h := append(kafka.SchemaHeaders(LifecycleVersion), sarama.RecordHeader{Key: []byte(events.HeaderSignature), Value: []byte(p.signer.Sign(b))})
	return &sarama.ProducerMessage{Topic: p.topic, Key: sarama.StringEncoder(rec.TaskID), Value: sarama.ByteEncoder(b), Headers: h}, nil
}

// Connect connects now instead of on the first record.
func (p *Producer) Connect(ctx context.Context) error { return p.p.Connect(ctx) }

// Emit queues rec for sending; a record that cannot be sent is logged.
func (p *Producer) Emit(ctx context.Context, rec Lifecycle) {
	m, err := p.message(rec)
	if err == nil {
		err = p.p.Enqueue(ctx, m)
	}
	if err != nil {
		p.log.ErrorContext(ctx, "lifecycle record lost", "topic", p.topic, "err", err)
	}
}

// PublishLifecycle sends recs and returns once every one is acknowledged.
func (p *Producer) PublishLifecycle(ctx context.Context, recs []Lifecycle) error {
	if len(recs) == 0 {
		return nil
	}
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		m, err := p.message(r)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if err := p.p.Send(ctx, msgs...); err != nil {
		return fmt.Errorf("lifecycle records: %w", err)
	}
	return nil
}

// Close sends what is queued and stops the producer.
func (p *Producer) Close() error {
	if err := p.p.Close(); err != nil {
		return fmt.Errorf("lifecycle producer close: %w", err)
	}
	return nil
}
