-- +goose Up
-- The event store. position orders appends globally; tx_id lets the relay
-- see rows in commit order without skipping a transaction that took an
-- earlier position but committed later (the watermill-sql approach).
CREATE TABLE events (
    position       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx_id          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    event_id       uuid        NOT NULL UNIQUE,
    stream_id      text        NOT NULL,
    stream_version bigint      NOT NULL CHECK (stream_version > 0),
    type           text        NOT NULL,
    occurred_at    timestamptz NOT NULL,
    metadata       jsonb       NOT NULL DEFAULT '{}',
    data           jsonb       NOT NULL,
    UNIQUE (stream_id, stream_version)
);
CREATE INDEX events_relay_order ON events (tx_id, position);

-- Wake the relay at commit (NOTIFY is delivered only when the transaction
-- commits), one signal per statement rather than per row.
-- +goose StatementBegin
CREATE FUNCTION events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cfgd_events', '');
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_notify();

-- Where each relay has published up to, in (tx_id, position) order.
CREATE TABLE relay_checkpoints (
    name       text PRIMARY KEY,
    tx_id      xid8        NOT NULL,
    position   bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Per projection and stream, the last stream version applied. Written in the
-- same transaction as the read-model change, so a re-delivered event is seen
-- and skipped.
CREATE TABLE projection_checkpoints (
    projection text   NOT NULL,
    stream_id  text   NOT NULL,
    version    bigint NOT NULL,
    PRIMARY KEY (projection, stream_id)
);

-- Per projection, the highest global position applied; drives lag metrics.
CREATE TABLE projection_positions (
    projection text PRIMARY KEY,
    position   bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE projection_positions;
DROP TABLE projection_checkpoints;
DROP TABLE relay_checkpoints;
DROP TABLE events;
DROP FUNCTION events_notify();
