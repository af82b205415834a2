-- One page of an owner's tasks, newest first, then the larger id, just
-- after ($2, $3) (for the first page, a point after every row), at most
-- $4 rows: a range scan of the index on (owner, created_at DESC, id DESC),
-- the expiry checked in the database on the store's clock, as every read
-- does. The owner is matched with `= $5` or `IS NULL`: both use the index,
-- where `IS NOT DISTINCT FROM` would not. `owner` leads the `ORDER BY` (one
-- value, so it changes nothing) for `IS NULL`, which PostgreSQL does not take
-- as one value: the rows are then read in the index's order, not sorted.
WITH clock AS (SELECT COALESCE($1::bigint,
    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now)
SELECT record::text FROM "{table}" WHERE {owner}
AND (created_at, id) < ($2::bigint, $3::bytea)
AND (expires_at IS NULL OR expires_at > (SELECT now FROM clock))
ORDER BY owner, created_at DESC, id DESC LIMIT $4
