-- +goose Up
-- The answers of request-log ingest calls sent with an Idempotency-Key,
-- kept 24 hours: a retry of the same call gets the first answer and counts
-- nothing again. A row without an answer is a call still running.
CREATE TABLE requestlog_idempotency (
    caller     text        NOT NULL,
    key        text        NOT NULL,
    body_hash  bytea       NOT NULL,
    status     integer,
    answer     bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (caller, key)
);
CREATE INDEX requestlog_idempotency_created_at ON requestlog_idempotency (created_at);

-- +goose Down
DROP TABLE requestlog_idempotency;
