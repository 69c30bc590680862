-- The lock table: one InnoDB row per key used in the last day.
--
-- Placeholder, filled in by sql.rs with a quoted identifier: {table}.
--
-- Columns (lock_core::backend::rules::columns::Columns says what each state keeps):
--   key        the lock's key, byte for byte: VARBINARY, so that no collation folds 'A'
--              into 'a' or 'x ' into 'x', and no character set converts it.
--   state      free | cooling | held | shared.
--   token      the SHA-256 of the holder's owner token, in hex: the token itself never
--              reaches the server, its logs or this table.
--   holder     the holder info, JSON.
--   fencing    the key's last fencing token.
--   holds      the reentrant hold count.
--   expires_us the end of the hold or of the cooldown, µs since the epoch of the
--              server's clock (SYSDATE(6)), never a client's.
--   forget_us  the end of the grace period, or of a free row's day of memory.
--   shares     the shared holds (semaphores, read locks), JSON.
--   writer     a waiting writer's marker, JSON.
-- The index on forget_us lets a sweep find old rows without reading the table.
--
-- ENGINE = InnoDB is required (row locks and transactions); the backend checks the
-- engine of an existing table. The statement is idempotent, and DDL commits on its own.
CREATE TABLE IF NOT EXISTS {table} (
    `key`      VARBINARY(1024) NOT NULL,
    state      VARBINARY(8)    NOT NULL,
    token      VARBINARY(64)   NULL,
    holder     BLOB            NULL,
    fencing    BIGINT          NOT NULL,
    holds      BIGINT          NULL,
    expires_us BIGINT          NOT NULL,
    forget_us  BIGINT          NOT NULL,
    shares     LONGBLOB        NULL,
    writer     BLOB            NULL,
    PRIMARY KEY (`key`),
    KEY forget (forget_us)
) ENGINE = InnoDB
