-- The row cap's share ($1, $2 and $14: the shard, and the cap's base share
-- and remainder), then the owner's ($3..$5, $15), then the row: each step
-- runs only on the one before's row, so a full counter writes nothing
-- after it (the caller rolls back what came before). A shard over its
-- share (rows created without the cap, or under a larger one) sends the
-- create to the exact path. The owner's counter row also counts the
-- record's bytes (its JSON as stored).
WITH clock AS (SELECT COALESCE($11::bigint,
    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now),
rows_counted AS (
    UPDATE "{table}_counts" SET n = n + 1
    WHERE scope = '\x00'::bytea AND shard = $1 AND ($2::bigint IS NULL OR (
        n < $2::bigint + (shard < $14::smallint)::int
        AND NOT EXISTS (SELECT 1 FROM "{table}_counts" other WHERE other.scope = '\x00'::bytea
            AND other.n > $2::bigint + (other.shard < $14::smallint)::int)))
    RETURNING 1),
owner_counted AS (
    INSERT INTO "{table}_counts" (scope, shard, n, bytes)
    SELECT $3, $4, 1, octet_length($13::text) FROM rows_counted
    WHERE $5::bigint IS NULL OR NOT EXISTS (SELECT 1 FROM "{table}_counts" other
        WHERE other.scope = $3 AND other.n > $5::bigint + (other.shard < $15::smallint)::int)
    ON CONFLICT (scope, shard) DO UPDATE
    SET n = "{table}_counts".n + 1, bytes = "{table}_counts".bytes + EXCLUDED.bytes
    WHERE $5::bigint IS NULL OR "{table}_counts".n < $5::bigint + ("{table}_counts".shard < $15::smallint)::int
    RETURNING 1),
inserted AS (
    INSERT INTO "{table}" (id, owner, revision, status, expires_at, retired_at, record, shard, owner_shard,
        created_at)
    SELECT $6, $7, $8, $9,
        CASE WHEN $10::bigint IS NULL THEN NULL
             WHEN $10::bigint >= 9223372036854775807 - clock.now THEN 9223372036854775807
             ELSE clock.now + $10::bigint END,
        CASE WHEN $12 THEN clock.now END, $13::json, $1, $4, $16
    FROM owner_counted, clock
    ON CONFLICT (id) DO NOTHING RETURNING 1)
SELECT (SELECT count(*) FROM rows_counted), (SELECT count(*) FROM owner_counted),
    (SELECT count(*) FROM inserted)
