-- +goose Up
-- The identity.users projection links a user to a registration source
-- inside a batch transaction that may run beside batches of other
-- partitions. An upsert would lock the existing source row until the batch
-- commits, and two batches linking the same sources in another order would
-- deadlock; this function only reads an existing row. Each statement of a
-- plpgsql function takes a fresh snapshot, so the last SELECT sees a row a
-- concurrent batch committed after the first one ran.
-- +goose StatementBegin
CREATE FUNCTION registration_source_id(p_url text, p_name text, p_at timestamptz) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    sid bigint;
BEGIN
    SELECT id INTO sid FROM registration_sources WHERE url = p_url;
    IF FOUND THEN
        RETURN sid;
    END IF;
    INSERT INTO registration_sources (url, name, created_at) VALUES (p_url, p_name, p_at)
    ON CONFLICT (url) DO NOTHING
    RETURNING id INTO sid;
    IF FOUND THEN
        RETURN sid;
    END IF;
    SELECT id INTO sid FROM registration_sources WHERE url = p_url;
    RETURN sid;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION registration_source_id(text, text, timestamptz);
