-- +goose Up
-- The generation of the ClickHouse request-log tables: `cfgd replay
-- requestlog.clickhouse` bumps it when it swaps rebuilt tables in, under an
-- exclusive advisory lock the sink takes shared around every write. A sink
-- that finds it changed forgets the per-partition offsets it cached from
-- the old tables and reads them again from the new ones.
CREATE TABLE requestlog_generation (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    generation bigint  NOT NULL
);
INSERT INTO requestlog_generation (generation) VALUES (0);

-- +goose Down
DROP TABLE requestlog_generation;
