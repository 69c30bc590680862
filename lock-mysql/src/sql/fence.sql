-- The fence of lock_mysql::fence: the highest fencing token that wrote to each resource.
-- {table} is the quoted table name. Each statement runs on its own.

-- migrate: the table, if missing (idempotent).
CREATE TABLE IF NOT EXISTS {table} (
    resource VARBINARY(767)  NOT NULL PRIMARY KEY,
    token    BIGINT UNSIGNED NOT NULL
) ENGINE = InnoDB;

-- raise: ? the resource, ? the writer's token. Inside the caller's transaction: the row
-- keeps the higher of its token and the writer's, and stays locked (an exclusive row
-- lock) until that transaction ends, so a newer writer's check waits for it.
INSERT INTO {table} (resource, token) VALUES (?, ?)
ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token));

-- checked: ? the resource: the highest token that wrote to it. After raise, in the same
-- transaction: above the writer's token means refused (raise changed nothing then). A
-- locking read: a plain SELECT is a snapshot read under InnoDB's REPEATABLE READ, and in a
-- transaction that read anything before the check, it would return the snapshot's token
-- (or no row) when raise left a newer holder's row unchanged, and admit a stale writer.
-- FOR UPDATE reads the newest committed row at every isolation level.
SELECT token FROM {table} WHERE resource = ? FOR UPDATE;

-- highest: ? the resource: the highest token that wrote to it, outside any check.
SELECT token FROM {table} WHERE resource = ?;
