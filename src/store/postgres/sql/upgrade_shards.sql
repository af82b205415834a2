ALTER TABLE "{table}" ADD COLUMN shard smallint NOT NULL DEFAULT 0,
ADD COLUMN owner_shard smallint NOT NULL DEFAULT 0

-- Round robin, so no shard holds more than its share of a cap the
-- table is within.
UPDATE "{table}" SET shard = (spread.i % {shards})::smallint,
owner_shard = (spread.j % {shards})::smallint
FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS i,
      row_number() OVER (PARTITION BY owner ORDER BY id) - 1 AS j FROM "{table}") spread
WHERE "{table}".id = spread.id
