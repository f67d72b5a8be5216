-- +goose Up
-- Passwordless sign-in. The write side needs only the user-id sequence; the
-- tables are read models built by the identity.* projections from events.

-- User ids are assigned by the write side inside the transaction that claims
-- the address (gaps after a rolled-back claim are harmless).
CREATE SEQUENCE user_ids AS bigint;

CREATE TABLE users (
    id            bigint PRIMARY KEY,
    email         text        NOT NULL UNIQUE,
    first_name    text        NOT NULL DEFAULT '' CHECK (char_length(first_name) <= 30),
    last_name     text        NOT NULL DEFAULT '' CHECK (char_length(last_name) <= 30),
    password_hash text,       -- argon2id; NULL: no password (OTP only)
    is_active     boolean     NOT NULL DEFAULT true,
    is_staff      boolean     NOT NULL DEFAULT false,
    is_superuser  boolean     NOT NULL DEFAULT false,
    date_joined   timestamptz NOT NULL,
    last_login    timestamptz,
    version       bigint      NOT NULL -- user stream version applied (read-your-writes)
);

CREATE TABLE profiles (
    user_id       bigint PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    bio           text        NOT NULL DEFAULT '',
    avatar        text        CHECK (avatar IS NULL OR avatar LIKE 'avatars/%'),
    phone         text        NOT NULL DEFAULT '' CHECK (char_length(phone) <= 20),
    date_of_birth date,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);

CREATE TABLE registration_sources (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url        text        NOT NULL UNIQUE,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE TABLE user_registration_sources (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    source_id  bigint      NOT NULL REFERENCES registration_sources (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL,
    UNIQUE (user_id, source_id)
);
CREATE INDEX user_registration_sources_created ON user_registration_sources (created_at);
CREATE INDEX user_registration_sources_source ON user_registration_sources (source_id);

-- Revoked sessions, for the access-token revocation set; no foreign key to
-- users, because this projection may run ahead of the users projection.
CREATE TABLE session_revocations (
    session_id uuid PRIMARY KEY,
    user_id    bigint      NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('api', 'web')),
    reason     text        NOT NULL,
    revoked_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL -- when the session would have ended
);
CREATE INDEX session_revocations_revoked ON session_revocations (revoked_at);

-- +goose Down
DROP TABLE session_revocations;
DROP TABLE user_registration_sources;
DROP TABLE registration_sources;
DROP TABLE profiles;
DROP TABLE users;
DROP SEQUENCE user_ids;
