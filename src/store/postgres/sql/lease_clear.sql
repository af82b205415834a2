-- Every hold of a lease, before a renewal that replaces them (inside its
-- transaction).
DELETE FROM "{table}_lease_holds" WHERE node = $1 AND incarnation = $2
