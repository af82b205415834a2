CREATE TABLE "{table}_counts" (scope bytea NOT NULL, shard smallint NOT NULL, n bigint NOT NULL,
    bytes bigint NOT NULL DEFAULT 0, PRIMARY KEY (scope, shard))
