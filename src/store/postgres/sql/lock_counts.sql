-- The shards of the row cap that lost rows, and every counter row of the
-- owners that did (to drop those left at zero), in the one order every
-- writer takes them in.
SELECT 1 FROM "{table}_counts" WHERE scope = ANY($1::bytea[]) AND (scope <> '\x00'::bytea
    OR (scope, shard) IN (SELECT d.scope, d.shard
        FROM unnest($1::bytea[], $2::smallint[]) AS d(scope, shard)))
ORDER BY scope, shard FOR UPDATE OF "{table}_counts"
