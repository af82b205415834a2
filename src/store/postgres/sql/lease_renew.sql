-- One statement, one round trip. The hold changes depend on `renewed`,
-- whose upsert waits for a concurrent claim's row lock and re-checks
-- `claimed` after it: a claimed lease has nothing renewed or changed.
-- Only a first renewal (or one that finds its lease) inserts. No row is
-- both deleted and inserted (held and released ids are disjoint; on a
-- replace, only rows outside the new set are deleted).
WITH prior AS (SELECT claimed FROM "{table}_leases" WHERE node = $1 AND incarnation = $2),
renewed AS (
    INSERT INTO "{table}_leases" AS l (node, incarnation, renewals, bound_ms)
    SELECT $1, $2, 1, $3 WHERE $4 OR EXISTS (SELECT 1 FROM prior)
    ON CONFLICT (node, incarnation) DO UPDATE
    SET renewals = l.renewals + 1, bound_ms = EXCLUDED.bound_ms
    WHERE NOT l.claimed
    RETURNING 1),
released AS (
    DELETE FROM "{table}_lease_holds" WHERE node = $1 AND incarnation = $2
    AND EXISTS (SELECT 1 FROM renewed)
    AND (task = ANY($6) OR ($7 AND NOT task = ANY($5)))
    RETURNING 1),
held AS (
    INSERT INTO "{table}_lease_holds" (node, incarnation, task)
    SELECT $1, $2, t FROM unnest($5::bytea[]) AS t
    WHERE EXISTS (SELECT 1 FROM renewed)
    ON CONFLICT DO NOTHING RETURNING 1)
SELECT EXISTS (SELECT 1 FROM renewed), EXISTS (SELECT 1 FROM prior),
    CASE WHEN (SELECT claimed FROM prior) THEN
        array(SELECT task FROM "{table}_lease_holds" WHERE node = $1 AND incarnation = $2)
    END,
    (SELECT count(*) FROM released), (SELECT count(*) FROM held)
