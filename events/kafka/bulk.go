package kafka

import (
	"time"

	"github.com/IBM/sarama"
)

// Topics of the request log (before Config.TopicPrefix). Request-log events
// bypass the event store: the edges produce them straight to
// TopicRequestLogs, and the ClickHouse sink moves records it cannot read to
// TopicRequestLogsDead.
const (
	TopicRequestLogs     = "requestlogs"
	TopicRequestLogsDead = "requestlogs.dead"
)

// BulkProducerSarama is Sarama for high-volume producers: LZ4-compressed
// batches flushed every few milliseconds, idempotent (so a retried send is
// never stored twice), and quick to give up on an unreachable broker so
// the caller can answer 503 instead of queueing without bound. timeout is
// how long a caller is willing to wait.
func (c Config) BulkProducerSarama(timeout time.Duration) *sarama.Config {
	s := c.Sarama()
	s.Producer.RequiredAcks = sarama.WaitForAll
	s.Producer.Idempotent = true
	s.Net.MaxOpenRequests = 1
	s.Producer.Compression = sarama.CompressionLZ4
	s.Producer.Flush.Frequency = 5 * time.Millisecond
	s.Producer.Flush.Bytes = 512 << 10
	s.Producer.MaxMessageBytes = 4 << 20
	s.Producer.Retry.Max = 3
	s.Producer.Retry.Backoff = 100 * time.Millisecond
	s.Producer.Return.Successes = true
	s.Producer.Return.Errors = true
	s.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	s.Producer.Timeout = timeout
	s.Net.DialTimeout = timeout
	s.Net.ReadTimeout = 5 * timeout
	s.Net.WriteTimeout = 5 * timeout
	s.Metadata.Retry.Max = 1
	s.Metadata.Retry.Backoff = 100 * time.Millisecond
	s.ChannelBufferSize = 64
	return s
}

// BulkConsumerSarama is Sarama for the consumers that move the request log
// in large batches (the ClickHouse sink, the API-key usage feed): offsets
// are committed by the caller once its store holds a batch, never by a
// timer, and only a few packed records per partition wait in memory, so
// memory stays bounded while the store is down.
func (c Config) BulkConsumerSarama() *sarama.Config {
	s := c.ConsumerSarama()
	s.Consumer.Offsets.AutoCommit.Enable = false
	s.ChannelBufferSize = 16
	s.Consumer.Fetch.Default = 1 << 20
	s.Consumer.MaxProcessingTime = time.Second
	return s
}
