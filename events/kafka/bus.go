package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cfgd/cfgd/events"
)

// Topic names, before Config.TopicPrefix.
const (
	// TopicEvents carries every event appended to the event store, keyed by
	// stream id so each stream stays in order within one partition.
	TopicEvents = "events"
)

// Config says where Kafka is and how cfgd lays out its topics.
type Config struct {
	Brokers     []string
	Partitions  int
	TopicPrefix string
	ClientID    string
	// SASL authenticates every producer, consumer and admin client.
	SASL SASL
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("bus: no brokers"))
	}
	if c.Partitions < 1 {
		errs = append(errs, errors.New("bus: partitions must be at least 1"))
	}
	if err := c.SASL.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Topic returns the full name of a cfgd topic.
func (c Config) Topic(name string) string { return c.TopicPrefix + name }

func (c Config) clientID() string {
	if c.ClientID == "" {
		return "cfgd"
	}
	return c.ClientID
}

// Sarama returns the base client settings: a protocol version that real
// Kafka 3.x/4.x and the embedded broker both speak, and the SASL login.
func (c Config) Sarama() *sarama.Config {
	s := sarama.NewConfig()
	s.Version = sarama.V3_6_0_0
	s.ClientID = c.clientID()
	s.Metadata.Retry.Max = 10
	s.Metadata.Retry.Backoff = 250 * time.Millisecond
	c.SASL.apply(s)
	return s
}

// ProducerSarama is Sarama for the event relay: acks from all in-sync
// replicas and an idempotent producer, so a retried send neither loses nor
// duplicates a record, and one request in flight keeps per-partition order.
func (c Config) ProducerSarama() *sarama.Config {
	s := c.Sarama()
	s.Producer.RequiredAcks = sarama.WaitForAll
	s.Producer.Idempotent = true
	s.Net.MaxOpenRequests = 1
	s.Producer.Retry.Max = 10
	s.Producer.Retry.Backoff = 200 * time.Millisecond
	s.Producer.Return.Successes = true
	s.Producer.Return.Errors = true
	s.Producer.Partitioner = sarama.NewHashPartitioner
	return s
}

// ConsumerSarama is Sarama for a consumer group that starts from the oldest
// record the first time it runs, so a new projection sees the whole log.
func (c Config) ConsumerSarama() *sarama.Config {
	s := c.Sarama()
	s.Consumer.Return.Errors = true
	s.Consumer.Offsets.Initial = sarama.OffsetOldest
	s.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	s.Consumer.Group.Session.Timeout = 10 * time.Second
	s.Consumer.Group.Heartbeat.Interval = time.Second
	return s
}

// Marshaler keys every message by its stream id (metadata "stream").
func Marshaler() kafka.MarshalerUnmarshaler {
	return kafka.NewWithPartitioningMarshaler(func(_ string, msg *message.Message) (string, error) {
		if s := msg.Metadata.Get(events.HeaderStream); s != "" {
			return s, nil
		}
		return msg.UUID, nil
	})
}

// Publisher is a Watermill publisher that hands a whole Publish call to
// Kafka at once. watermill-kafka's publisher waits for the acknowledgement
// of each message before sending the next, one round trip per event; this
// one gives them all to sarama's producer, which packs them into as few
// produce requests as the partitions allow. Per-partition order still
// holds: the producer is idempotent with one request in flight per broker.
type Publisher struct {
	producer  sarama.SyncProducer
	marshaler kafka.Marshaler
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns the event relay's publisher.
func NewPublisher(c Config) (*Publisher, error) {
	p, err := sarama.NewSyncProducer(c.Brokers, c.ProducerSarama())
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return &Publisher{producer: p, marshaler: Marshaler()}, nil
}

// PublishError reports a Publish of which only some messages were stored.
// Messages after a failed one may be stored too (sarama hands the whole
// batch to the producer at once), so a caller that keeps order re-sends
// from the first failed message on.
type PublishError struct {
	Failed []int // indexes into the msgs given to Publish, ascending
	Total  int
	Err    error // the first failure's cause
}

func (e *PublishError) Error() string {
	return fmt.Sprintf("produce: %d of %d messages failed, the first at %d: %v", len(e.Failed), e.Total, e.Failed[0], e.Err)
}

func (e *PublishError) Unwrap() error { return e.Err }

// FirstFailed is the index of the first message that was not stored; every
// message before it was.
func (e *PublishError) FirstFailed() int { return e.Failed[0] }

// Publish sends msgs to topic and returns once Kafka acknowledged all of
// them. When some fail it returns *PublishError.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	out := make([]*sarama.ProducerMessage, len(msgs))
	for i, m := range msgs {
		km, err := p.marshaler.Marshal(topic, m)
		if err != nil {
			return fmt.Errorf("marshal message %s: %w", m.UUID, err)
		}
		out[i] = km
	}
	if err := p.producer.SendMessages(out); err != nil {
		return publishError(out, err)
	}
	return nil
}

func publishError(sent []*sarama.ProducerMessage, err error) error {
	var perrs sarama.ProducerErrors
	if !errors.As(err, &perrs) || len(perrs) == 0 {
		return fmt.Errorf("produce: %w", err)
	}
	at := make(map[*sarama.ProducerMessage]int, len(sent))
	for i, m := range sent {
		at[m] = i
	}
	failed := make([]int, 0, len(perrs))
	first := perrs[0].Err
	for _, pe := range perrs {
		i, ok := at[pe.Msg]
		if !ok {
			return fmt.Errorf("produce: %w", err) // cannot tell which: treat all as failed
		}
		failed = append(failed, i)
	}
	slices.Sort(failed)
	for _, pe := range perrs {
		if at[pe.Msg] == failed[0] {
			first = pe.Err
		}
	}
	return &PublishError{Failed: failed, Total: len(sent), Err: first}
}

// Close flushes and closes the producer.
func (p *Publisher) Close() error {
	if err := p.producer.Close(); err != nil {
		return fmt.Errorf("close kafka producer: %w", err)
	}
	return nil
}

// EnsureTopics creates each missing topic with c.Partitions partitions. An
// existing topic is left as it is.
func EnsureTopics(ctx context.Context, c Config, log *slog.Logger, names ...string) error {
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.Sarama())
	if err != nil {
		return fmt.Errorf("kafka admin: %w", err)
	}
	defer admin.Close()
	existing, err := admin.ListTopics()
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	for _, n := range names {
		topic := c.Topic(n)
		if _, ok := existing[topic]; ok {
			continue
		}
		err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: int32(c.Partitions), ReplicationFactor: -1}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
		log.InfoContext(ctx, "kafka topic created", "topic", topic, "partitions", c.Partitions)
	}
	return nil
}

// Ping checks that a broker answers a metadata request.
func Ping(ctx context.Context, c Config) error {
	s := c.Sarama()
	s.Metadata.Retry.Max = 0
	s.Net.DialTimeout = 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d > 0 && d < s.Net.DialTimeout {
			s.Net.DialTimeout = d
		}
	}
	client, err := sarama.NewClient(c.Brokers, s)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer client.Close()
	if len(client.Brokers()) == 0 {
		return errors.New("kafka: no brokers in metadata")
	}
	return nil
}
