SELECT shard, n FROM "{table}_counts" WHERE scope = $1 ORDER BY shard FOR UPDATE
