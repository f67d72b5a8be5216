// Package outbox moves appended events from the Postgres event store to
// Kafka (the transactional outbox): it reads in commit order, keeps one
// fenced leader, and checkpoints what it published.
package outbox
