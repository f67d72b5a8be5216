-- +goose Up
-- Which ClickHouse request-log sink wrote each partition of the topic
-- last. Two sinks can write one partition: two consumer groups on the topic
-- (a group renamed during a rolling update), or a member that lost the
-- partition in a rebalance and has not noticed yet. Each batch locks its
-- partitions (a transaction-level advisory lock per partition) and reads
-- this table; a sink that finds another writer here reads the offsets
-- ClickHouse holds again before it inserts, so no offset goes in twice.
CREATE TABLE requestlog_writers (
    topic           text    NOT NULL,
    kafka_partition integer NOT NULL,
    writer          text    NOT NULL,
    PRIMARY KEY (topic, kafka_partition)
);

-- +goose Down
DROP TABLE requestlog_writers;
