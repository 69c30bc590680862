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

-- highest: ? the resource: the highest token that wrote to it. After raise, in the same
-- transaction: above the writer's token means refused (raise changed nothing then).
SELECT token FROM {table} WHERE resource = ?;
