package kafka

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/deploy/clip"
	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
)

// Headers added to a dead letter, next to the original message's headers.
const (
	HeaderDeadReason     = "deadletter_reason"
	HeaderDeadProjection = "deadletter_projection" // the projection or sink that gave up
	HeaderDeadError      = "deadletter_error"
	HeaderDeadTopic      = "deadletter_topic"
	HeaderDeadPartition  = "deadletter_partition"
	HeaderDeadOffset     = "deadletter_offset"
	HeaderDeadAt         = "deadletter_at"
)

// Dead-letter reasons.
const (
	ReasonBadSignature = "bad_signature" // signature missing or wrong: maybe forged
	ReasonUndecodable  = "undecodable"   // the message or its payload does not decode
	ReasonInvalid      = "invalid"       // it decodes, but a value breaks the rules of its store
	ReasonHandler      = "handler_error" // the handler failed on every attempt
)

// maxErrorHeader bounds the error text carried in a dead letter.
const maxErrorHeader = 1000

// deadLetters writes one consumer's dead letters.
type deadLetters struct {
	c          Config
	topic      string
	log        *slog.Logger
	first, max time.Duration

	once sync.Once
	p    *Producer
	err  error
}

func (d *deadLetters) producer() (*Producer, error) {
	d.once.Do(func() { d.p, d.err = NewProducer(d.c, ProducerOptions{}, d.log) })
	return d.p, d.err
}

func (d *deadLetters) close() {
	if d.p != nil {
		_ = d.p.Close()
	}
}

// send publishes m to the dead-letter topic, retrying until Kafka took it
// or ctx ends.
func (d *deadLetters) send(ctx context.Context, m *sarama.ConsumerMessage, consumer, reason string, cause error) error {
	p, err := d.producer()
	if err != nil {
		return err
	}
	msg := clip.To(cause.Error(), maxErrorHeader)
	headers := make([]sarama.RecordHeader, 0, len(m.Headers)+7)
	for _, h := range m.Headers {
		if h != nil {
			headers = append(headers, *h)
		}
	}
	for _, kv := range [][2]string{
		{HeaderDeadReason, reason},
		{HeaderDeadProjection, consumer},
		{HeaderDeadError, msg},
		{HeaderDeadTopic, m.Topic},
		{HeaderDeadPartition, strconv.FormatInt(int64(m.Partition), 10)},
		{HeaderDeadOffset, strconv.FormatInt(m.Offset, 10)},
		{HeaderDeadAt, time.Now().UTC().Format(time.RFC3339Nano)},
	} {
		headers = append(headers, sarama.RecordHeader{Key: []byte(kv[0]), Value: []byte(kv[1])})
	}
	pm := &sarama.ProducerMessage{Topic: d.topic, Value: sarama.ByteEncoder(m.Value), Headers: headers}
	if m.Key != nil {
		pm.Key = sarama.ByteEncoder(m.Key)
	}
	bo := process.Backoff(d.first, d.max)
	for {
		err := p.Send(ctx, pm)
		if err == nil {
			break
		}
		d.log.ErrorContext(ctx, "dead-letter publish failed; the partition waits", "err", err)
		if !process.Wait(ctx, bo) {
			return fmt.Errorf("dead letter: %w", err)
		}
	}
	d.log.ErrorContext(ctx, "message dead-lettered", "consumer", consumer, "reason", reason, "err", msg,
		"stream", header(m.Headers, events.HeaderStream), "version", header(m.Headers, events.HeaderVersion),
		"type", header(m.Headers, events.HeaderType), "topic", m.Topic, "partition", m.Partition, "offset", m.Offset)
	return nil
}

func header(hs []*sarama.RecordHeader, name string) string {
	for _, h := range hs {
		if h != nil && string(h.Key) == name {
			return string(h.Value)
		}
	}
	return ""
}

// DeadLetter is one record of a dead-letter topic. Stream, Version and
// Type come from the original message's headers, which a forged message
// may have made up.
type DeadLetter struct {
	At         time.Time
	Projection string
	Reason     string
	Error      string
	Stream     string
	Version    int64
	Type       string
	Topic      string // where the original was read
	Partition  int32
	Offset     int64
	Key        []byte
	Body       []byte
	Headers    map[string]string
}

// ReadDeadLetters reads the whole dead-letter topic (a name before
// Config.TopicPrefix) as it is now, oldest first.
func ReadDeadLetters(ctx context.Context, c Config, topic string) ([]DeadLetter, error) {
	r, err := NewReader(c)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []DeadLetter
	err = r.ReadAll(ctx, c.Topic(topic), 500, func(_ context.Context, _ int32, msgs []*sarama.ConsumerMessage) error {
		for _, m := range msgs {
			out = append(out, toDeadLetter(m))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	slices.SortStableFunc(out, func(a, b DeadLetter) int { return a.At.Compare(b.At) })
	return out, nil
}

func toDeadLetter(m *sarama.ConsumerMessage) DeadLetter {
	hs := make(map[string]string, len(m.Headers))
	for _, h := range m.Headers {
		if h != nil {
			hs[string(h.Key)] = string(h.Value)
		}
	}
	d := DeadLetter{
		Projection: hs[HeaderDeadProjection], Reason: hs[HeaderDeadReason], Error: hs[HeaderDeadError],
		Stream: hs[events.HeaderStream], Type: hs[events.HeaderType], Topic: hs[HeaderDeadTopic],
		Key: m.Key, Body: m.Value, Headers: hs,
	}
	d.At, _ = time.Parse(time.RFC3339Nano, hs[HeaderDeadAt])
	if d.At.IsZero() {
		d.At = m.Timestamp
	}
	d.Version, _ = strconv.ParseInt(hs[events.HeaderVersion], 10, 64)
	part, _ := strconv.ParseInt(hs[HeaderDeadPartition], 10, 32)
	d.Partition = int32(part)
	d.Offset, _ = strconv.ParseInt(hs[HeaderDeadOffset], 10, 64)
	return d
}

// ListDeadLetters prints one line per dead letter of the projections'
// dead-letter topic, oldest first: time, projection, stream, version,
// type, reason and where the original was read (topic/partition@offset),
// separated by tabs. It backs `cfgd deadletters list`.
func ListDeadLetters(ctx context.Context, c Config, w io.Writer) error {
	dls, err := ReadDeadLetters(ctx, c, TopicDeadLetters)
	if err != nil {
		return err
	}
	for _, d := range dls {
		if _, err := fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s/%d@%d\n", d.At.UTC().Format(time.RFC3339), d.Projection,
			orDash(d.Stream), d.Version, orDash(d.Type), d.Reason, d.Topic, d.Partition, d.Offset); err != nil {
			return fmt.Errorf("dead letters: write: %w", err)
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
