-- The procedure every obtain, prolong and release of an exclusive hold calls: one `CALL`,
-- one round trip, where deciding in the client takes two (see sql.rs). It holds the same
-- decision table as lock_core::backend::rules (lock-mysql/tests/decision_table.rs checks it
-- row by row through the server), for exclusive holds only: a row that holds shares, a live
-- writer's marker, or a state it does not know, it leaves alone and answers 'defer', and
-- the client decides that row with the rules (storage.rs).
--
-- Placeholders, filled in by sql.rs with quoted identifiers: {table}, {proc}. The name
-- carries a version (`…_op_v2`): a backend never runs another version's body, and a
-- migration leaves older versions' procedures for the backends still calling them.
--
-- Parameters: p_op obtain | prolong | release; p_key; p_token, the SHA-256 of the owner
-- token in hex (the token never reaches the server); p_holder, the holder info as JSON
-- (obtain); p_ttl_us and p_grace_us (obtain, prolong); p_delay_us, the cooldown after a
-- release (0 for none).
--
-- Answers one row after the transaction ended: outcome (the words of lock_sql::reply::Word),
-- remaining_us (busy), holder (busy by a holder), fencing (acquired), holds (reacquired,
-- decremented).
--
-- The clock is the server's, read after the row lock was granted: SYSDATE(6) in the
-- select list of the locking read, evaluated as the row is returned (SYSDATE is the instant
-- it runs; NOW would be the routine's start, before the wait), or, on a missing row, in a
-- statement after the read (lock-mysql/tests/hardening.rs,
-- a_call_that_waited_for_the_row_reads_the_clock_after_the_wait, holds it to that). Under --sysdate-is-now SYSDATE is NOW: a call that
-- waited for the row then reads an instant from before its wait, which can only make a
-- hold look live a few milliseconds longer (a late prolong or release answered as on time,
-- a new hold's end that much earlier); who holds the key is never misjudged, since the
-- call sees the row the call before it wrote.
--
-- Made with SQL SECURITY INVOKER: the caller's own rights on the table apply, and it needs
-- EXECUTE on the procedure. Created by migrate() (migrate.rs) in a session whose sql_mode
-- is pinned, since a routine keeps the mode it was created under.
CREATE PROCEDURE IF NOT EXISTS {proc}(
    p_op       VARCHAR(8),
    p_key      VARBINARY(1024),
    p_token    VARBINARY(64),
    p_holder   BLOB,
    p_ttl_us   BIGINT,
    p_grace_us BIGINT,
    p_delay_us BIGINT)
MODIFIES SQL DATA
SQL SECURITY INVOKER
op: BEGIN
    DECLARE v_found    INT DEFAULT 1;
    DECLARE v_state    VARBINARY(8);
    DECLARE v_token    VARBINARY(64);
    DECLARE v_holder   BLOB;
    DECLARE v_fencing  BIGINT DEFAULT 0;
    DECLARE v_holds    BIGINT;
    DECLARE v_expires  BIGINT;
    DECLARE v_forget   BIGINT;
    DECLARE v_writer   BLOB;
    DECLARE v_now      BIGINT;
    DECLARE v_phase    VARCHAR(8);
    DECLARE v_ours     INT DEFAULT 0;
    DECLARE o_outcome  VARCHAR(16);
    DECLARE o_remaining BIGINT;
    DECLARE o_holder   BLOB;
    DECLARE o_fencing  BIGINT;
    DECLARE o_holds    BIGINT;
    -- A day, as a free row remembers its fencing token (columns.rs, FREE_KEEP_US).
    DECLARE c_keep_us  BIGINT DEFAULT 86400000000;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
    -- Any error (a lock wait past the deadline, a lost connection's kill) rolls back
    -- whatever this call wrote, and reaches the client with its own number.
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;

    START TRANSACTION;
    -- The row under its exclusive lock, and the clock: SYSDATE is evaluated as the row is
    -- returned, after the lock was granted.
    SELECT state, token, holder, fencing, holds, expires_us, forget_us, writer,
           CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)
      INTO v_state, v_token, v_holder, v_fencing, v_holds, v_expires, v_forget, v_writer,
           v_now
      FROM {table} WHERE `key` = p_key FOR UPDATE;
    IF v_found = 0 AND p_op = 'obtain' THEN
        -- A new key. Two obtains of it must queue on one row lock, and a missing row has
        -- none: a free row with fencing 0 (the grant is floored at the clock) is made, the
        -- insert, or the duplicate's no-op update when another obtain made it meanwhile,
        -- taking the row's exclusive lock either way; then the row is read as above.
        INSERT INTO {table} (`key`, state, fencing, expires_us, forget_us)
        VALUES (p_key, 'free', 0, 0, 0)
        ON DUPLICATE KEY UPDATE `key` = `key`;
        SET v_found = 1;
        SELECT state, token, holder, fencing, holds, expires_us, forget_us, writer,
               CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)
          INTO v_state, v_token, v_holder, v_fencing, v_holds, v_expires, v_forget, v_writer,
               v_now
          FROM {table} WHERE `key` = p_key FOR UPDATE;
    ELSEIF v_found = 0 THEN
        SET v_now = CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED);
    END IF;

    -- Shared holds, a live writer's marker (or one this body cannot read), a state it does
    -- not know, a hold without its token or count: the client decides, and says what is
    -- wrong with a row that is not what the backend writes.
    IF v_found = 1 AND (
           v_state NOT IN ('free', 'cooling', 'held')
        OR (v_state = 'held' AND (v_token IS NULL OR v_holds IS NULL))
        OR (v_writer IS NOT NULL
            AND IFNULL(CAST(JSON_EXTRACT(CONVERT(v_writer USING utf8mb4), '$.until') AS SIGNED)
                       > v_now, TRUE)))
    THEN
        ROLLBACK;
        SELECT 'defer', NULL, NULL, NULL, NULL;
        LEAVE op;
    END IF;

    IF v_found = 0 OR v_state = 'free' OR v_forget <= v_now THEN
        SET v_phase = 'free';
    ELSEIF v_state = 'cooling' THEN
        SET v_phase = 'cooling';
    ELSE
        SET v_ours = (v_token = p_token);  -- both non-NULL here
        SET v_phase = IF(v_expires > v_now, 'live', 'expired');
    END IF;

    IF p_op = 'obtain' THEN
        IF v_phase = 'cooling' THEN
            SET o_outcome = 'busy', o_remaining = v_expires - v_now;
        ELSEIF v_phase = 'live' AND NOT v_ours THEN
            SET o_outcome = 'busy', o_remaining = v_expires - v_now, o_holder = v_holder;
        ELSEIF v_phase = 'live' THEN
            SET o_outcome = 'reacquired', o_holds = v_holds + 1;
            UPDATE {table}
               SET holds = o_holds,
                   expires_us = v_now + p_ttl_us,
                   forget_us = v_now + p_ttl_us + p_grace_us
             WHERE `key` = p_key;
        ELSE
            -- Above the key's last token, and never below the server's clock in µs: tokens
            -- keep growing after the row is swept or the table is lost (this assumes the
            -- server's clock never goes back).
            SET o_outcome = 'acquired', o_fencing = GREATEST(v_fencing + 1, v_now);
            UPDATE {table}
               SET state = 'held', token = p_token, holder = p_holder, fencing = o_fencing,
                   holds = 1, expires_us = v_now + p_ttl_us,
                   forget_us = v_now + p_ttl_us + p_grace_us, shares = NULL
             WHERE `key` = p_key;
        END IF;
    ELSEIF NOT v_ours OR v_phase NOT IN ('live', 'expired') THEN
        SET o_outcome = 'lost';
    ELSEIF p_op = 'prolong' THEN
        SET o_outcome = IF(v_phase = 'live', 'prolonged', 'prolonged_late');
        UPDATE {table}
           SET expires_us = v_now + p_ttl_us, forget_us = v_now + p_ttl_us + p_grace_us
         WHERE `key` = p_key;
    ELSEIF p_op = 'release' THEN
        IF v_phase = 'live' AND v_holds > 1 THEN
            SET o_outcome = 'decremented', o_holds = v_holds - 1;
            UPDATE {table} SET holds = o_holds WHERE `key` = p_key;
        ELSE
            SET o_outcome = IF(v_phase = 'live', 'released', 'released_late');
            IF p_delay_us > 0 THEN
                UPDATE {table}
                   SET state = 'cooling', token = NULL, holder = NULL, holds = NULL,
                       expires_us = v_now + p_delay_us, forget_us = v_now + p_delay_us
                 WHERE `key` = p_key;
            ELSE
                UPDATE {table}
                   SET state = 'free', token = NULL, holder = NULL, holds = NULL,
                       expires_us = v_now, forget_us = v_now + c_keep_us
                 WHERE `key` = p_key;
            END IF;
        END IF;
    ELSE
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'unknown lock operation';
    END IF;

    -- Nothing written: ROLLBACK, so that a new key's free row goes too.
    IF o_outcome IN ('busy', 'lost') THEN
        ROLLBACK;
    ELSE
        COMMIT;
    END IF;
    SELECT o_outcome, o_remaining, o_holder, o_fencing, o_holds;
END
