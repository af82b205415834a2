UPDATE "{table}_counts" SET n = "{table}_counts".n - d.k
FROM unnest($1::bytea[], $2::smallint[], $3::bigint[]) AS d(scope, shard, k)
WHERE "{table}_counts".scope = d.scope AND "{table}_counts".shard = d.shard
