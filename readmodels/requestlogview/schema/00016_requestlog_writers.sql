-- +goose Up
-- Which ClickHouse request-log sink wrote each partition of the topic
-- last. Two sinks can write one partition: two consumer groups on the topic
-- (a group renamed during a rolling update), or a member that lost the
-- partition in a rebalance and has not noticed yet. Each batch locks its
-- partitions (a transaction-level advisory lock per partition) and reads
-- this table; a sink that finds another writer here reads the offsets
-- ClickHouse holds again before it inserts, so no offset goes in twice.
-- base is added to the partition's Kafka offsets before they are stored:
-- 0 until the topic is deleted and created again (its offsets start over),
-- then one past the highest offset ClickHouse held of the old topic.
CREATE TABLE requestlog_writers (
    topic           text    NOT NULL,
    kafka_partition integer NOT NULL,
    writer          text    NOT NULL,
    base            bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, kafka_partition)
);

-- The id Kafka gave the request-log topic (KIP-516) when the sink last
-- looked: another id means the topic was deleted and created again.
CREATE TABLE requestlog_topics (
    topic    text PRIMARY KEY,
    topic_id text NOT NULL
);

-- +goose Down
DROP TABLE requestlog_topics;
DROP TABLE requestlog_writers;
