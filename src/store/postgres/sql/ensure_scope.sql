INSERT INTO "{table}_counts" (scope, shard, n) SELECT $1, s, 0 FROM generate_series(0, $2::smallint - 1) s
ON CONFLICT (scope, shard) DO NOTHING
