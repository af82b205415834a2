ALTER TABLE "{table}" ADD COLUMN created_at bigint

-- From the record's own `created_at` (milliseconds); a record without a
-- readable one lists last.
UPDATE "{table}" SET created_at = CASE
    WHEN record->>'created_at' ~ '^[0-9]{1,20}$'
    THEN LEAST((record->>'created_at')::numeric, 9223372036854775807)::bigint
    ELSE 0 END

-- Rows inserted by nodes of the earlier version, still running, get the
-- database's time instead.
ALTER TABLE "{table}" ALTER COLUMN created_at SET DEFAULT
    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint,
ALTER COLUMN created_at SET NOT NULL
