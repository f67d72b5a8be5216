-- +goose Up
-- The signing cut-over of the bus: per topic and partition, the end offset
-- when a build that signs its records first started on the topic. Records
-- below it may be unsigned (an older cfgd wrote them); above it, on a
-- partition with no row (added later) and on a topic of another id
-- (deleted and created again), a record must be signed. Written once per
-- topic, first writer wins; never updated.
CREATE TABLE IF NOT EXISTS signing_watermarks (
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    -- The Kafka topic id (KIP-516) the offsets belong to; empty when the
    -- brokers give topics no id.
    topic_id    text        NOT NULL,
    end_offset  bigint      NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
);

-- +goose Down
DROP TABLE IF EXISTS signing_watermarks;
