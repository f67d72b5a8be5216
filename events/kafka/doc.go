// Package kafka connects cfgd to Kafka, once for every package: the sarama
// settings, the topic names and their creation, the one producer
// (Producer, and the relay's Watermill Publisher over it), the one consume
// loop (Consume), the range reader (Reader) replays read topics with, the
// dead letters, the retry schedule (Backoff), and the embedded
// Kafka-protocol broker used when no brokers are configured.
// docs/kafka.md describes them.
package kafka
