package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/cfgd/cfgd/events"
)

// Config says where Kafka is and how cfgd lays out its topics.
type Config struct {
	Brokers     []string
	Partitions  int
	TopicPrefix string
	ClientID    string
	// SASL authenticates every producer, consumer and admin client.
	SASL SASL
	// Compression of every produced record: none, gzip, snappy, lz4 or
	// zstd (default lz4).
	Compression string
	// MaxMessageBytes bounds one produced record (default 1,000,000 bytes,
	// Kafka's own limit); a larger record is refused.
	MaxMessageBytes int
	// Replica names this process among the members of each consumer
	// group, stable across its restarts and different for every process
	// sharing a group. Set, every member is static (KIP-345,
	// group.instance.id = group + "." + Replica): a restart within the
	// session timeout takes back the same partitions with no rebalance of
	// the other members. Empty: dynamic members (each start rebalances).
	Replica string
	// YieldBackoff is how long a consumer that met a record only a newer
	// cfgd understands stays out of its group (YieldError), so a newer
	// member takes the partition, before it joins again; default
	// DefaultYieldBackoff.
	YieldBackoff time.Duration
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
	var codec sarama.CompressionCodec
	if err := codec.UnmarshalText([]byte(c.compression())); err != nil {
		errs = append(errs, fmt.Errorf("bus: compression: %w", err))
	}
	if c.Replica != "" {
		if err := ValidReplica(c.Replica); err != nil {
			errs = append(errs, fmt.Errorf("bus: %w", err))
		}
	}
	if c.MaxMessageBytes < 0 || (c.MaxMessageBytes > 0 && c.MaxMessageBytes < 1<<10) {
		errs = append(errs, errors.New("bus: max message bytes must be at least 1 KiB"))
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

// Publisher is the event relay's Watermill publisher over a Producer: it
// hands a whole Publish call to Kafka at once. watermill-kafka's publisher
// waits for the acknowledgement of each message before sending the next,
// one round trip per event; this one gives them all to the producer, which
// packs them into as few produce requests as the partitions allow.
// Per-partition order still holds: the producer is idempotent with one
// request in flight per broker.
type Publisher struct {
	producer  *Producer
	marshaler kafka.Marshaler
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns the event relay's publisher; it connects on the
// first Publish. Failures are returned to the relay, which logs them.
func NewPublisher(c Config) (*Publisher, error) {
	p, err := NewProducer(c, ProducerOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	return &Publisher{producer: p, marshaler: Marshaler()}, nil
}

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
	return p.producer.Send(context.Background(), out...)
}

// Close flushes and closes the producer.
func (p *Publisher) Close() error { return p.producer.Close() }

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
