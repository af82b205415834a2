CREATE INDEX IF NOT EXISTS "{table}_list_idx" ON "{table}" (owner, created_at DESC, id DESC)
