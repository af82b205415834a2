ALTER TABLE "{table}" ALTER COLUMN record TYPE json USING record::json
