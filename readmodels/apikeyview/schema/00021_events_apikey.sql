-- +goose Up
-- After a start, a replica trusts api_keys only once the projection has
-- passed every key event stored before (checkpoints.Current): this index
-- finds those events without scanning the event store.
CREATE INDEX events_apikey ON events (position) WHERE type IN ('apikey.created', 'apikey.revoked');

-- +goose Down
DROP INDEX events_apikey;
