-- Owner-scoped reads check the owner and the expiry in the database: a
-- foreign or expired row is never sent, nor decoded, exactly like a
-- missing one.
WITH clock AS (SELECT COALESCE($3::bigint,
    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) SELECT revision, record::text FROM "{table}" WHERE id = $1
AND owner IS NOT DISTINCT FROM $2 AND (expires_at IS NULL OR expires_at > (SELECT now FROM clock))
