-- +goose Up
-- The sweep deletes revocations whose session has ended (expires_at passed:
-- no token of it is valid any more); it finds them through this index in
-- bounded steps instead of scanning the table.
CREATE INDEX session_revocations_expires ON session_revocations (expires_at);
-- After a start, a replica trusts session_revocations only once the
-- projection has passed every session.revoked stored before
-- (checkpoints.Current): this index finds those events without scanning
-- the event store.
CREATE INDEX events_session_revoked ON events (position) WHERE type = 'session.revoked';

-- +goose Down
DROP INDEX events_session_revoked;
DROP INDEX session_revocations_expires;
