ALTER TABLE "{table}" ALTER COLUMN owner TYPE bytea USING convert_to(owner, 'UTF8')
