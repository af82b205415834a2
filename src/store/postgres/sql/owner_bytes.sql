-- One owner's bytes: the sum of its counter rows, one per shard at most.
SELECT coalesce(sum(bytes), 0)::bigint FROM "{table}_counts" WHERE scope = $1
