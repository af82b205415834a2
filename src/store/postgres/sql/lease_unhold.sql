-- A batch of released holds, inside a renewal's transaction: each found
-- through the primary key.
DELETE FROM "{table}_lease_holds" h
USING unnest($3::bytea[]) AS r(task)
WHERE h.node = $1 AND h.incarnation = $2 AND h.task = r.task
