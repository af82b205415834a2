-- An owner's counter rows at zero: a principal without tasks keeps no row
-- (a create brings its row back with `INSERT … ON CONFLICT`). The row cap's
-- own rows stay.
DELETE FROM "{table}_counts" WHERE scope = ANY($1::bytea[]) AND scope <> '\x00'::bytea AND n = 0
