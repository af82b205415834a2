INSERT INTO "{table}_counts" (scope, shard, n) SELECT '\x00'::bytea, shard, count(*) FROM "{table}" GROUP BY shard

INSERT INTO "{table}_counts" (scope, shard, n, bytes)
SELECT CASE WHEN owner IS NULL THEN '\x01'::bytea ELSE '\x02'::bytea || owner END,
    owner_shard, count(*), coalesce(sum(octet_length(record::text)), 0) FROM "{table}" GROUP BY 1, 2
