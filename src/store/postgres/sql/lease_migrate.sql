CREATE TABLE IF NOT EXISTS "{table}_leases" (
    node text NOT NULL,
    incarnation bigint NOT NULL,
    renewals bigint NOT NULL,
    bound_ms bigint NOT NULL,
    claimed boolean NOT NULL DEFAULT false,
    PRIMARY KEY (node, incarnation))

CREATE TABLE IF NOT EXISTS "{table}_lease_holds" (
    node text NOT NULL,
    incarnation bigint NOT NULL,
    task bytea NOT NULL,
    PRIMARY KEY (node, incarnation, task))

CREATE INDEX IF NOT EXISTS "{table}_lease_holds_task" ON "{table}_lease_holds" (task)
