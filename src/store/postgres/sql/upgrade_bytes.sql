ALTER TABLE "{table}_counts" ADD COLUMN bytes bigint NOT NULL DEFAULT 0

-- Each owner's counter rows from the rows they count.
UPDATE "{table}_counts" SET bytes = counted.bytes
FROM (SELECT CASE WHEN owner IS NULL THEN '\x01'::bytea ELSE '\x02'::bytea || owner END AS scope,
        owner_shard AS shard, sum(octet_length(record::text))::bigint AS bytes
    FROM "{table}" GROUP BY 1, 2) counted
WHERE "{table}_counts".scope = counted.scope AND "{table}_counts".shard = counted.shard
