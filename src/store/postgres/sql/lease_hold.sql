-- A batch of holds, inside a renewal's transaction (after its lease row was
-- renewed, and so locked).
INSERT INTO "{table}_lease_holds" (node, incarnation, task)
SELECT $1, $2, t FROM unnest($3::bytea[]) AS t
ON CONFLICT DO NOTHING
