-- An expired row is never written, whatever the caller read before.
WITH clock AS (SELECT COALESCE($6::bigint,
    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now), written AS (
    UPDATE "{table}" SET revision = $3, status = $4,
    retired_at = CASE WHEN $5 THEN (SELECT now FROM clock) END, record = $7::json
    WHERE id = $1 AND revision = $2 AND (expires_at IS NULL OR expires_at > (SELECT now FROM clock)) RETURNING 1)
SELECT count(*) FROM written
