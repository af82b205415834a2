CREATE TABLE IF NOT EXISTS "{table}" (
    id bytea PRIMARY KEY,
    owner bytea,
    revision bigint NOT NULL,
    status text NOT NULL,
    expires_at bigint,
    retired_at bigint,
    record json NOT NULL,
    created_at bigint NOT NULL DEFAULT
        floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    shard smallint NOT NULL DEFAULT 0,
    owner_shard smallint NOT NULL DEFAULT 0)

CREATE INDEX IF NOT EXISTS "{table}_owner_idx" ON "{table}" (owner)

CREATE INDEX IF NOT EXISTS "{table}_expires_at_idx" ON "{table}" (expires_at)
    WHERE expires_at IS NOT NULL

CREATE INDEX IF NOT EXISTS "{table}_retired_at_idx" ON "{table}" (retired_at)
    WHERE retired_at IS NOT NULL
