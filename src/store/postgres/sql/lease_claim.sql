-- The update waits for a renewal in flight and re-checks the count after
-- it; the holds it returns are those of the claimed lease.
WITH claimed AS (
    UPDATE "{table}_leases" SET claimed = true
    WHERE node = $1 AND incarnation = $2 AND (claimed OR renewals = $3)
    RETURNING 1)
SELECT EXISTS (SELECT 1 FROM claimed),
    array(SELECT task FROM "{table}_lease_holds" WHERE node = $1 AND incarnation = $2)
