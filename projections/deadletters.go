package projections

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
)

// TopicDeadLetters (before kafka.Config.TopicPrefix) receives every event a
// projection gave up on, with the original key, body and headers.
//
// Giving up on version N of a stream moves the projection's checkpoint past
// N, as for an event it has no handler for: the later events of the stream
// are applied, and Wait treats N as seen. The read model then lacks N's
// effect; the dead letter (and cfgd_projection_deadletters_total) is the
// record of that, and replaying the projection after a fix restores it.
// A message refused for its signature or an unreadable envelope moves no
// checkpoint: its stream and version cannot be trusted.
const TopicDeadLetters = "deadletters"

// Headers added to a dead letter, next to the original message's headers.
const (
	HeaderDeadReason     = "deadletter_reason"
	HeaderDeadProjection = "deadletter_projection"
	HeaderDeadError      = "deadletter_error"
	HeaderDeadTopic      = "deadletter_topic"
	HeaderDeadPartition  = "deadletter_partition"
	HeaderDeadOffset     = "deadletter_offset"
	HeaderDeadAt         = "deadletter_at"
)

// Dead-letter reasons.
const (
	ReasonBadSignature = "bad_signature" // signature missing or wrong: maybe forged
	ReasonUndecodable  = "undecodable"   // the envelope or its payload does not decode
	ReasonHandler      = "handler_error" // the handler failed on every attempt
)

// source is where a message came from.
type source struct {
	topic     string
	partition int32
	offset    int64
	key       []byte
	value     []byte
	headers   []*sarama.RecordHeader
}

// maxErrorHeader bounds the error text carried in a dead letter.
const maxErrorHeader = 1000

// deadLetter publishes src to the dead-letter topic, retrying until Kafka
// took it or ctx ends: an event must never disappear silently.
func (h *groupHandler) deadLetter(ctx context.Context, src source, projection, reason string, cause error) error {
	msg := cause.Error()
	if len(msg) > maxErrorHeader {
		msg = msg[:maxErrorHeader]
	}
	headers := make([]sarama.RecordHeader, 0, len(src.headers)+7)
	for _, hd := range src.headers {
		if hd != nil {
			headers = append(headers, *hd)
		}
	}
	for k, v := range map[string]string{
		HeaderDeadReason:     reason,
		HeaderDeadProjection: projection,
		HeaderDeadError:      msg,
		HeaderDeadTopic:      src.topic,
		HeaderDeadPartition:  strconv.FormatInt(int64(src.partition), 10),
		HeaderDeadOffset:     strconv.FormatInt(src.offset, 10),
		HeaderDeadAt:         time.Now().UTC().Format(time.RFC3339Nano),
	} {
		headers = append(headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	pm := &sarama.ProducerMessage{
		Topic:   h.r.cfg.Bus.Topic(TopicDeadLetters),
		Key:     sarama.ByteEncoder(src.key),
		Value:   sarama.ByteEncoder(src.value),
		Headers: headers,
	}
	for attempt := 0; ; attempt++ {
		_, _, err := h.dlq.SendMessage(pm)
		if err == nil {
			break
		}
		h.log.Error("dead-letter publish failed; the partition waits", "err", err)
		if err := sleep(ctx, h.backoff(attempt)); err != nil {
			return err
		}
	}
	h.r.metrics.deadletters.WithLabelValues(projection, reason).Inc()
	h.log.Error("event dead-lettered", "projection", projection, "reason", reason, "err", msg,
		"stream", header(src.headers, events.HeaderStream), "version", header(src.headers, events.HeaderVersion),
		"type", header(src.headers, events.HeaderType), "topic", src.topic, "partition", src.partition, "offset", src.offset)
	return nil
}

// DeadLetter is one record of the dead-letter topic. Stream, Version and
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

// ReadDeadLetters reads the whole dead-letter topic as it is now, oldest
// first.
func ReadDeadLetters(ctx context.Context, c kafka.Config) ([]DeadLetter, error) {
	client, err := sarama.NewClient(c.Brokers, c.ConsumerSarama())
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	defer client.Close()
	topic := c.Topic(TopicDeadLetters)
	parts, err := client.Partitions(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return nil, nil // nothing was ever dead-lettered
	}
	if err != nil {
		return nil, fmt.Errorf("dead letters: partitions of %s: %w", topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("dead letters: consumer: %w", err)
	}
	defer consumer.Close()
	var out []DeadLetter
	for _, p := range parts {
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("dead letters: oldest offset of %s/%d: %w", topic, p, err)
		}
		newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("dead letters: newest offset of %s/%d: %w", topic, p, err)
		}
		if newest <= oldest {
			continue
		}
		got, err := readPartition(ctx, consumer, topic, p, oldest, newest)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	slices.SortStableFunc(out, func(a, b DeadLetter) int { return a.At.Compare(b.At) })
	return out, nil
}

func readPartition(ctx context.Context, consumer sarama.Consumer, topic string, p int32, from, until int64) ([]DeadLetter, error) {
	pc, err := consumer.ConsumePartition(topic, p, from)
	if err != nil {
		return nil, fmt.Errorf("dead letters: consume %s/%d: %w", topic, p, err)
	}
	defer pc.Close()
	var out []DeadLetter
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dead letters: read %s/%d: %w", topic, p, ctx.Err())
		case err := <-pc.Errors():
			return nil, fmt.Errorf("dead letters: read %s/%d: %w", topic, p, err)
		case m := <-pc.Messages():
			out = append(out, toDeadLetter(m))
			if m.Offset >= until-1 {
				return out, nil
			}
		}
	}
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

// ListDeadLetters prints one line per dead letter, oldest first: time,
// projection, stream, version, type, reason and where the original was
// read (topic/partition@offset), separated by tabs. It backs
// `cfgd deadletters list`.
func ListDeadLetters(ctx context.Context, c kafka.Config, w io.Writer) error {
	dls, err := ReadDeadLetters(ctx, c)
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
