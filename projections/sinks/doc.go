// Package sinks holds the Kafka-to-store consumers of the telemetry
// topics, each a kafka.Consume handler with its replay feed: Usage (the
// request log into the API-key usage columns, Postgres) and Lifecycle (the
// task lifecycle records into task_lifecycle and task_runs, Postgres). The
// request log's ClickHouse sink is projections/requestlog's Sink, built on
// the same loop. docs/kafka.md lists the options each one uses.
package sinks
