UPDATE "{table}_counts" SET n = "{table}_counts".n - d.k, bytes = "{table}_counts".bytes - d.b
FROM unnest($1::bytea[], $2::smallint[], $3::bigint[], $4::bigint[]) AS d(scope, shard, k, b)
WHERE "{table}_counts".scope = d.scope AND "{table}_counts".shard = d.shard
