-- +goose Up
-- The Kafka topic id (KIP-516) the offsets were read from: a topic deleted
-- and created again under the same name gets a new id and starts over at
-- offset 0, so offsets of another id must not be trusted. Empty: recorded
-- before this column, adopted by the next batch.
ALTER TABLE consumer_offsets ADD COLUMN topic_id text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE consumer_offsets DROP COLUMN topic_id;
