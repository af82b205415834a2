CREATE TABLE IF NOT EXISTS "{table}_feed" (
    seq bigserial PRIMARY KEY,
    id bytea NOT NULL,
    at bigint NOT NULL DEFAULT
            (extract(epoch FROM clock_timestamp()) * 1000)::bigint)

CREATE INDEX IF NOT EXISTS "{table}_feed_at_idx" ON "{table}_feed" (at)

CREATE OR REPLACE FUNCTION "{table}_feed_fn"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN INSERT INTO "{table}_feed" (id) VALUES (NEW.id); RETURN NULL; END $$

-- Created only when missing, so a restart takes no table lock.
DO $do$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger
    WHERE tgname = '{table}_feed_trg' AND tgrelid = '"{table}"'::regclass) THEN
    CREATE TRIGGER "{table}_feed_trg" AFTER INSERT OR UPDATE ON "{table}"
    FOR EACH ROW EXECUTE FUNCTION "{table}_feed_fn"();
  END IF;
END $do$
