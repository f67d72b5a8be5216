package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/tasks"
)

// Emitter produces lifecycle records. Task processing never waits for
// Kafka: records go to sarama's async producer, which batches and retries.
type Emitter struct {
	producer sarama.AsyncProducer
	topic    string
	log      *slog.Logger
	wg       sync.WaitGroup
	once     sync.Once
}

// NewEmitter connects a producer to c's brokers and creates the lifecycle
// topic when missing.
func NewEmitter(ctx context.Context, c kafka.Config, log *slog.Logger) (*Emitter, error) {
	if err := kafka.EnsureTopics(ctx, c, log, tasks.TopicLifecycle); err != nil {
		return nil, err
	}
	sc := c.ProducerSarama()
	// Ride out a broker restart of about a minute: a record given up is
	// a task the statistics never see. Records wait in memory meanwhile.
	sc.Producer.Retry.Max = 120
	sc.Producer.Retry.Backoff = 500 * time.Millisecond
	p, err := sarama.NewAsyncProducer(c.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("lifecycle producer: %w", err)
	}
	e := &Emitter{producer: p, topic: c.Topic(tasks.TopicLifecycle), log: log}
	e.wg.Add(2)
	go func() {
		defer e.wg.Done()
		for range p.Successes() {
		}
	}()
	go func() {
		defer e.wg.Done()
		for err := range p.Errors() {
			log.Error("lifecycle record lost", "topic", e.topic, "err", err.Err)
		}
	}()
	return e, nil
}

// Emit queues rec for sending.
func (e *Emitter) Emit(_ context.Context, rec tasks.Lifecycle) {
	b, err := json.Marshal(rec)
	if err != nil {
		e.log.Error("lifecycle record", "err", err)
		return
	}
	e.producer.Input() <- &sarama.ProducerMessage{Topic: e.topic, Key: sarama.StringEncoder(rec.TaskID), Value: sarama.ByteEncoder(b)}
}

// Close sends what is queued and stops the producer.
func (e *Emitter) Close() error {
	var err error
	e.once.Do(func() {
		err = e.producer.Close()
		e.wg.Wait()
	})
	if err != nil {
		return fmt.Errorf("lifecycle producer close: %w", err)
	}
	return nil
}
