WITH gone AS (
    DELETE FROM "{table}_leases" WHERE node = $1 AND incarnation = $2 AND claimed
    RETURNING 1)
DELETE FROM "{table}_lease_holds" WHERE node = $1 AND incarnation = $2
AND EXISTS (SELECT 1 FROM gone)
