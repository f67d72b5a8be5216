// Package kafka connects cfgd to Kafka: the sarama settings every client
// uses, topic names and creation, the batch publisher (a Watermill
// publisher), and the embedded Kafka-protocol broker used when no brokers
// are configured.
package kafka
