-- An expired row is never written, whatever the caller read before. The
-- owner's counter row of the record takes the change in its size (the JSON
-- as stored): the new record's less the one it replaces, read in the same
-- snapshot (a row the update finds changed since has another revision, and
-- is not written).
WITH clock AS (SELECT COALESCE($6::bigint,
    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now),
old AS (SELECT octet_length(record::text) AS size FROM "{table}" WHERE id = $1 AND revision = $2),
written AS (
    UPDATE "{table}" SET revision = $3, status = $4,
    retired_at = CASE WHEN $5 THEN (SELECT now FROM clock) END, record = $7::json
    WHERE id = $1 AND revision = $2 AND (expires_at IS NULL OR expires_at > (SELECT now FROM clock))
    RETURNING owner, owner_shard),
counted AS (
    UPDATE "{table}_counts" SET bytes = "{table}_counts".bytes + octet_length($7::text) - old.size
    FROM written, old
    WHERE "{table}_counts".scope = CASE WHEN written.owner IS NULL THEN '\x01'::bytea
        ELSE '\x02'::bytea || written.owner END
    AND "{table}_counts".shard = written.owner_shard
    RETURNING 1)
SELECT count(*) FROM written
