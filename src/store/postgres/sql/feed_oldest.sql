SELECT min(seq) FROM "{table}_feed"
