-- One statement, one round trip. The hold changes depend on `renewed`,
-- whose upsert waits for a concurrent claim's row lock and re-checks
-- `claimed` after it: a claimed lease has nothing renewed or changed.
-- Only a first renewal (or one that finds its lease) inserts. Held and
-- released ids are disjoint. Both changes are driven by the ids sent, each
-- found through the primary key, so that the cost follows the change
-- whatever plan is chosen, never the holds already stored. A task newly
-- held is taken over: other leases' rows for it go, so it has one holder.
WITH prior AS (SELECT claimed FROM "{table}_leases" WHERE node = $1 AND incarnation = $2),
renewed AS (
    INSERT INTO "{table}_leases" AS l (node, incarnation, renewals, bound_ms)
    SELECT $1, $2, 1, $3 WHERE $4 OR EXISTS (SELECT 1 FROM prior)
    ON CONFLICT (node, incarnation) DO UPDATE
    SET renewals = l.renewals + 1, bound_ms = EXCLUDED.bound_ms
    WHERE NOT l.claimed
    RETURNING 1),
released AS (
    DELETE FROM "{table}_lease_holds" h
    USING unnest($6::bytea[]) AS r(task)
    WHERE h.node = $1 AND h.incarnation = $2 AND h.task = r.task
    AND EXISTS (SELECT 1 FROM renewed)
    RETURNING 1),
taken AS (
    DELETE FROM "{table}_lease_holds" h USING unnest($5::bytea[]) AS t(task)
    WHERE h.task = t.task AND NOT (h.node = $1 AND h.incarnation = $2)
    AND EXISTS (SELECT 1 FROM renewed)
    AND NOT EXISTS (SELECT 1 FROM "{table}_lease_holds" m
        WHERE m.node = $1 AND m.incarnation = $2 AND m.task = t.task)
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
