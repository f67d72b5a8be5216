-- +goose Up
-- API keys. Ids come from a sequence drawn by the create command; the table
-- is the read model built by the apikey.keys projection. Only the SHA-256
-- hash of a key is kept, never the key.
CREATE SEQUENCE api_key_ids AS bigint;

CREATE TABLE api_keys (
    id            bigint PRIMARY KEY,
    name          text        NOT NULL,
    key_type      text        NOT NULL CHECK (key_type IN ('service', 'cli', 'webhook', 'internal', 'development')),
    key_hash      text        NOT NULL UNIQUE,
    masked_key    text        NOT NULL,
    user_id       bigint      NOT NULL,
    user_email    text        NOT NULL,
    is_active     boolean     NOT NULL DEFAULT true,
    revoked_at    timestamptz,
    -- Usage comes from the request-log stream, applied in batches.
    request_count bigint      NOT NULL DEFAULT 0,
    last_used_at  timestamptz,
    expires_at    timestamptz,
    created_at    timestamptz NOT NULL,
    created_by    text        NOT NULL
);
CREATE INDEX api_keys_user ON api_keys (user_id);
CREATE INDEX api_keys_type ON api_keys (key_type);

-- +goose Down
DROP TABLE api_keys;
DROP SEQUENCE api_key_ids;
