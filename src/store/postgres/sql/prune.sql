-- Rows a sweep at `now` removes: expired, or retired at or before the
-- retention cutoff ($2, the retention in milliseconds; NULL: none). Rows are
-- locked before they are deleted, so that two prunes of the same rows (the
-- janitor's sweep and a full create making room) never wait on each other in
-- opposite orders: the sweep of the whole table skips rows another prune
-- holds (that one deletes them), and an owner's prune takes its rows in id
-- order, waiting for a prune that holds them. Each owner's counter rows
-- lose the rows' bytes as well.
WITH clock AS (SELECT COALESCE($1::bigint,
    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now), gone AS (
    DELETE FROM "{table}" WHERE id IN (
        SELECT id FROM "{table}" WHERE {filter}
        AND (expires_at <= (SELECT now FROM clock)
             OR ($2::bigint IS NOT NULL AND retired_at <=
                 GREATEST((SELECT now FROM clock) - $2::bigint, 0)))
        {order} LIMIT $3 FOR UPDATE {skip})
    RETURNING shard, owner, owner_shard, octet_length(record::text) AS size)
SELECT scope, shard, count(*), sum(size)::bigint FROM (
    SELECT '\x00'::bytea AS scope, shard, 0 AS size FROM gone
    UNION ALL
    SELECT CASE WHEN owner IS NULL THEN '\x01'::bytea
                ELSE '\x02'::bytea || owner END, owner_shard, size FROM gone) counted
GROUP BY scope, shard ORDER BY scope, shard
