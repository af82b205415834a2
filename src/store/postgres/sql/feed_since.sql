SELECT seq, id FROM "{table}_feed" WHERE seq > $1 ORDER BY seq LIMIT $2
