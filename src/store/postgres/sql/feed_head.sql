SELECT coalesce(max(seq), 0) FROM "{table}_feed"
