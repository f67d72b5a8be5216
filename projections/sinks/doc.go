// Package sinks holds the Kafka-to-store consumers of the telemetry
// topics, each a kafka.Consume handler: RequestLogs (the request log into
// ClickHouse, raw rows and rollups, deduplicated by Kafka offset; with its
// replay Codec and fence), Usage (the request log into the API-key usage
// columns, Postgres, exactly once) and Lifecycle (the task lifecycle
// records into task_lifecycle and task_runs, Postgres), with the replay
// feeds of the last two. docs/kafka.md lists the options each one uses.
package sinks
