WITH clock AS (SELECT COALESCE($2::bigint,
    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) SELECT record::text FROM "{table}" WHERE id = ANY($1) AND (expires_at IS NULL OR expires_at > (SELECT now FROM clock))
AND ($3 OR owner IS NOT DISTINCT FROM $4)
