-- By the database's clock, as `at` was written.
DELETE FROM "{table}_feed"
WHERE at <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $1
