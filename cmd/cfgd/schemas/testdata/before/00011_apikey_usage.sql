-- +goose Up
-- Kafka offsets applied by consumers that fold a topic into Postgres read
-- models (API-key usage from the request log). The offset is written in
-- the same transaction as the read-model change, so a record redelivered
-- after a crash between that commit and the Kafka offset commit is
-- recognised and skipped instead of counted twice.
CREATE TABLE consumer_offsets (
    consumer        text   NOT NULL,
    topic           text   NOT NULL,
    kafka_partition int    NOT NULL,
    last_offset     bigint NOT NULL,
    PRIMARY KEY (consumer, topic, kafka_partition)
);

-- +goose Down
DROP TABLE consumer_offsets;
