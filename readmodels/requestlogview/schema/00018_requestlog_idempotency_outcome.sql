-- +goose Up
-- An ingest call's remembered answer is its transport-neutral outcome
-- (requestlog.Outcome as JSON: accepted, rejected, the first errors),
-- which each transport renders. Rows stored before keep status and
-- answer, and replay from them until they expire (24 h). Each caller's
-- remembered bytes are counted per window of 24 hours, so one caller
-- cannot grow the table without bound.
ALTER TABLE requestlog_idempotency ADD COLUMN outcome bytea;
CREATE TABLE requestlog_idempotency_callers (
    caller text        PRIMARY KEY,
    since  timestamptz NOT NULL,
    bytes  bigint      NOT NULL
);

-- +goose Down
DROP TABLE requestlog_idempotency_callers;
ALTER TABLE requestlog_idempotency DROP COLUMN outcome;
