-- Rows a sweep at `now` removes: expired, or retired at or before the
-- retention cutoff ($2, the retention in milliseconds; NULL: none).
WITH clock AS (SELECT COALESCE($1::bigint,
    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now), gone AS (
    DELETE FROM "{table}" WHERE id IN (
        SELECT id FROM "{table}" WHERE {filter}
        AND (expires_at <= (SELECT now FROM clock)
             OR ($2::bigint IS NOT NULL AND retired_at <=
                 GREATEST((SELECT now FROM clock) - $2::bigint, 0)))
        LIMIT $3)
    RETURNING shard, owner, owner_shard)
SELECT scope, shard, count(*) FROM (
    SELECT '\x00'::bytea AS scope, shard FROM gone
    UNION ALL
    SELECT CASE WHEN owner IS NULL THEN '\x01'::bytea
                ELSE '\x02'::bytea || owner END, owner_shard FROM gone) counted
GROUP BY scope, shard ORDER BY scope, shard
