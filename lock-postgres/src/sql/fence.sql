-- The fence of lock_postgres::fence: the highest fencing token that wrote to each resource.
-- {table} is the quoted, schema-qualified table name. Two statements, each run on its own.

-- migrate: the table, if missing (idempotent).
CREATE TABLE IF NOT EXISTS {table} (
    resource text   PRIMARY KEY,
    token    bigint NOT NULL
);

-- check: $1 the resource, $2 the writer's token. Inside the caller's transaction: the
-- row is written (and stays locked until that transaction ends, so a newer writer waits
-- for it) only when no higher token wrote before; then the token comes back. No row back
-- means refused, and nothing was written. Equal tokens pass: one holder writes as often
-- as it likes. ON CONFLICT locks the row even when its WHERE refuses the update.
INSERT INTO {table} AS f (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token
RETURNING f.token;

-- highest: $1 the resource: the highest token that wrote to it.
SELECT token FROM {table} WHERE resource = $1;
