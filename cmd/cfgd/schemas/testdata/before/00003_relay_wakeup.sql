-- +goose Up
-- The relay is woken by the appending process (in-process, or a NOTIFY sent
-- after the commit by a process whose relay is on standby) instead of a
-- trigger: a NOTIFY inside the appending transaction takes a database-wide
-- lock until its commit is flushed, so appends committed one at a time.
DROP TRIGGER events_notify ON events;
DROP FUNCTION events_notify();

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cfgd_events', '');
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_notify();
