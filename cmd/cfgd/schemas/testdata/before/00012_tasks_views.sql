-- +goose Up
-- The task views move from the tasks.control reactor to the tasks.queues
-- read model, which replays (the reactor keeps only the side effects).
-- tasks.queues starts where the reactor stopped: its checkpoints become
-- the view's, so the events the reactor already recorded are not applied
-- again.
INSERT INTO projection_checkpoints (projection, stream_id, version)
SELECT 'tasks.queues', stream_id, version FROM projection_checkpoints WHERE projection = 'tasks.control'
ON CONFLICT DO NOTHING;
INSERT INTO projection_positions (projection, position, updated_at)
SELECT 'tasks.queues', position, now() FROM projection_positions WHERE projection = 'tasks.control'
ON CONFLICT DO NOTHING;

-- A clear's count of removed tasks is now an event (queue.clear_applied,
-- appended by the reactor). The counts of the clears the old reactor
-- carried out exist only in task_queues.cleared: each queue's total becomes
-- one such event, and the column starts from zero, so the live view (which
-- applies the event) and a replay both arrive at the same total.
-- (The old reactor's "cleared" lifecycle rows stay in task_lifecycle and
-- task_runs; they were never on the lifecycle topic, so a replay of
-- tasks.queues does not bring them back.)
INSERT INTO events (event_id, stream_id, stream_version, type, occurred_at, metadata, data)
SELECT gen_random_uuid(), 'queue-' || q.name,
       coalesce((SELECT max(e.stream_version) FROM events e WHERE e.stream_id = 'queue-' || q.name), 0) + 1,
       'queue.clear_applied', now(), '{"actor": "migration 00012"}',
       jsonb_build_object('queue', q.name, 'removed', q.cleared, 'at', now())
FROM task_queues q WHERE q.cleared > 0;
UPDATE task_queues SET cleared = 0 WHERE cleared > 0;

-- +goose Down
-- The reactor's checkpoints were never changed; the view's go.
DELETE FROM projection_checkpoints WHERE projection = 'tasks.queues';
DELETE FROM projection_positions WHERE projection = 'tasks.queues';
