-- The sizes of the rows found come first; the records are sent only when
-- they fit the budget ($5) together, otherwise one NULL says they do not.
WITH clock AS (SELECT COALESCE($2::bigint,
    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now),
found AS (SELECT id, octet_length(record::text) AS size FROM "{table}"
    WHERE id = ANY($1) AND (expires_at IS NULL OR expires_at > (SELECT now FROM clock)) AND ($3 OR owner IS NOT DISTINCT FROM $4)),
total AS (SELECT coalesce(sum(size), 0) AS size FROM found)
SELECT NULL::text FROM total WHERE total.size > $5
UNION ALL
SELECT "{table}".record::text FROM "{table}" JOIN found ON found.id = "{table}".id
WHERE (SELECT size FROM total) <= $5
