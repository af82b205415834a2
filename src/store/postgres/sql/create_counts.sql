CREATE TABLE "{table}_counts" (scope bytea NOT NULL, shard smallint NOT NULL, n bigint NOT NULL,
    PRIMARY KEY (scope, shard))
