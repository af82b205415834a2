-- A batch of holds, inside a renewal's transaction (after its lease row was
-- renewed, and so locked). A task newly held is taken over, as in a single
-- renewal: other leases' rows for it go (found through the task index; a
-- data-modifying WITH runs whether or not it is read).
WITH taken AS (
    DELETE FROM "{table}_lease_holds" h USING unnest($3::bytea[]) AS t(task)
    WHERE h.task = t.task AND NOT (h.node = $1 AND h.incarnation = $2)
    RETURNING 1)
INSERT INTO "{table}_lease_holds" (node, incarnation, task)
SELECT $1, $2, t FROM unnest($3::bytea[]) AS t
ON CONFLICT DO NOTHING
