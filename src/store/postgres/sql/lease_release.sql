-- A node gives its lease up: the delete waits for a claim in flight and
-- re-checks `claimed` after it, so a claimed lease is left to its claimer.
WITH gone AS (
    DELETE FROM "{table}_leases" WHERE node = $1 AND incarnation = $2 AND NOT claimed
    RETURNING 1)
DELETE FROM "{table}_lease_holds" WHERE node = $1 AND incarnation = $2
AND EXISTS (SELECT 1 FROM gone)
