-- +goose Up
-- Task queues. task_queues and task_worker_commands are built by the
-- tasks.control reactor from queue-<name> and worker-<id> events;
-- task_lifecycle and task_runs by the lifecycle sink from the
-- tasks.lifecycle topic (telemetry, not the event store).

CREATE TABLE task_queues (
    name        text        PRIMARY KEY,
    is_paused   boolean     NOT NULL DEFAULT false,
    last_action text        NOT NULL,
    cleared     bigint      NOT NULL DEFAULT 0, -- waiting tasks removed by clears, in total
    version     bigint      NOT NULL,           -- queue stream version applied
    updated_at  timestamptz NOT NULL
);

CREATE TABLE task_worker_commands (
    worker_id    text        PRIMARY KEY,
    action       text        NOT NULL,
    version      bigint      NOT NULL,
    requested_at timestamptz NOT NULL
);

-- One row per lifecycle step: the key makes a redelivered step a no-op.
CREATE TABLE task_lifecycle (
    task_id   text        NOT NULL,
    step      text        NOT NULL,
    attempt   int         NOT NULL,
    queue     text        NOT NULL,
    type      text        NOT NULL,
    worker_id text        NOT NULL DEFAULT '',
    error     text        NOT NULL DEFAULT '',
    at        timestamptz NOT NULL,
    PRIMARY KEY (task_id, step, attempt)
);

-- One row per task: its furthest step (rank orders steps that may arrive
-- out of order from different producers).
CREATE TABLE task_runs (
    task_id     text        PRIMARY KEY,
    queue       text        NOT NULL,
    type        text        NOT NULL,
    state       text        NOT NULL,
    rank        bigint      NOT NULL,
    attempts    int         NOT NULL DEFAULT 0,
    worker_id   text        NOT NULL DEFAULT '',
    error       text        NOT NULL DEFAULT '',
    enqueued_at timestamptz,
    finished_at timestamptz,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX task_runs_state ON task_runs (state);
CREATE INDEX task_runs_updated ON task_runs (updated_at DESC);

-- +goose Down
DROP TABLE task_runs;
DROP TABLE task_lifecycle;
DROP TABLE task_worker_commands;
DROP TABLE task_queues;
