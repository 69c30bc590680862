-- The lock table and the functions every operation calls.
--
-- Placeholders, filled in by sql.rs with quoted identifiers: {schema}, {table}, {fn},
-- {sweep}, {check}, {waits}; and string literals: {channel}, the LISTEN/NOTIFY channel of release
-- notifications that wake one waiter, {channel_all}, the one whose notifications wake every
-- waiter of the key, and {lock_prefix}, what a key's advisory lock id is the hash of (with the
-- key appended).
--
-- The functions' names carry a version (`_op_v7`, `_sweep_v3`, `_check_v2`, `_waits_v1`: the
-- version a function last changed in; sql.rs names them): a backend never runs the body of another version, and
-- backends of two versions on one table still exclude each other (same rows, same advisory
-- lock ids). A migration leaves the functions of older versions in place for the backends
-- still running them during a rolling deploy.
--
-- migrate() runs this whole file in one transaction under an advisory lock, so concurrent
-- migrations wait for each other; every statement is idempotent.
--
-- Every function runs with `search_path = pg_catalog, pg_temp`, whatever the role's or
-- the database's: a search_path that lists another schema before pg_catalog would
-- otherwise let whoever may create functions there replace clock_timestamp() or
-- pg_advisory_xact_lock() for this code. Every name of this file's own is qualified.

CREATE SCHEMA IF NOT EXISTS {schema};

-- One row per key used in the last day. state 'held': token (the SHA-256 of the owner
-- token, in hex: the token itself never reaches the server, its logs or this table),
-- holder, holds, expires_at;
-- forget_at ends the grace period. 'cooling': expires_at = forget_at = the end of the
-- cooldown. 'free': released; the row stays a day (forget_at) only to remember `fencing`,
-- the last fencing token of the key. Times are the server's clock_timestamp(), never a
-- client's clock. waiting: the processes that wait for a release notification of the key,
-- as {"<backend id>": "<end of its lease>"}; a release notifies only while some lease
-- runs. A backend enters its id when its first waiter of the key subscribes, renews the
-- lease while it has waiters (so that a row made again, by a sweep or after a TRUNCATE,
-- learns of it again within a renewal), and takes its id out after its last; a process
-- that dies stops renewing, and its entry ends with its lease. Entering and renewing are
-- the same idempotent write, so a statement sent twice counts nobody twice. waiters: the
-- count of earlier versions (op_v3 and before), still read so that their waiters are
-- notified during a rolling deploy, never written by this version.
--
-- state 'shared' (semaphores, read locks): shares holds the key's capacity and every hold
-- as {"capacity": C, "holds": [{"token", "holder", "holds", "expires", "forget",
-- "fencing", "weight"}]} (times in server µs since the epoch); token is '' (nobody's),
-- holder the holder of the hold that ends last, expires_at and forget_at the last hold's
-- ends: so an earlier version's function, which knows nothing of shares, sees the key
-- held by someone else until then. writer: a waiting writer's marker,
-- {"token": T, "until": µs}, beside any state. Rows that hold shares or a live marker are
-- decided by the client (lock-postgres/src/storage.rs), not by {fn}, which answers 'defer'.
CREATE TABLE IF NOT EXISTS {schema}.{table} (
    key        text        PRIMARY KEY,
    state      text        NOT NULL CHECK (state IN ('held', 'cooling', 'free', 'shared')),
    token      text        CHECK (state <> 'held' OR token IS NOT NULL),
    holder     text,
    fencing    bigint      NOT NULL,
    holds      integer,
    expires_at timestamptz NOT NULL,
    forget_at  timestamptz NOT NULL,
    waiters    integer     NOT NULL DEFAULT 0,
    waiting    jsonb       NOT NULL DEFAULT '{}',
    shares     jsonb,
    writer     jsonb
);

-- A table made by an earlier version lacks `waiters`, `waiting`, `shares` or `writer`, and
-- its state check lacks 'shared'. Checked first: ALTER TABLE would take the table's
-- exclusive lock on every migration even with IF NOT EXISTS.
DO $add$
DECLARE
    c record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = '{schema}.{table}'::regclass
                      AND attname = 'shares' AND NOT attisdropped) THEN
        ALTER TABLE {schema}.{table} ADD COLUMN shares jsonb, ADD COLUMN writer jsonb;
    END IF;
    FOR c IN SELECT conname FROM pg_constraint
              WHERE conrelid = '{schema}.{table}'::regclass AND contype = 'c'
                AND pg_get_constraintdef(oid) LIKE '%''cooling''%'
                AND pg_get_constraintdef(oid) NOT LIKE '%''shared''%' LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', '{schema}.{table}', c.conname);
        ALTER TABLE {schema}.{table} ADD CHECK (state IN ('held', 'cooling', 'free', 'shared'));
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = '{schema}.{table}'::regclass
                      AND attname = 'waiters' AND NOT attisdropped) THEN
        ALTER TABLE {schema}.{table} ADD COLUMN waiters integer NOT NULL DEFAULT 0;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = '{schema}.{table}'::regclass
                      AND attname = 'waiting' AND NOT attisdropped) THEN
        ALTER TABLE {schema}.{table} ADD COLUMN waiting jsonb NOT NULL DEFAULT '{}';
    END IF;
END
$add$;

-- The entries of `waiting` whose lease runs past `at`.
CREATE OR REPLACE FUNCTION {schema}.{waits}(waiting jsonb, at timestamptz) RETURNS jsonb
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT coalesce(jsonb_object_agg(w.key, w.value), '{}'::jsonb)
      FROM jsonb_each_text(waiting) w
     WHERE w.value::timestamptz > at
$fn$;

-- Raises when a write that must touch the key's row touched nothing: the row vanished
-- under the statement, which holding the key's advisory lock should make impossible. The
-- transaction rolls back and the client gets a retry-safe error (SQLSTATE 40001), never an
-- outcome that claims a write it did not make.
CREATE OR REPLACE FUNCTION {schema}.{check}(touched boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF NOT touched THEN
        RAISE EXCEPTION 'the lock row vanished during the operation' USING ERRCODE = '40001';
    END IF;
END
$fn$;

-- Deletes up to 100 rows past their grace period or their day of memory that no process
-- waits for, skipping every row whose key lock another statement holds: an operation that has read its row holds
-- that lock until it commits, and one that has not read it yet will wait for this
-- transaction and then find the row gone. Never waits for anything. Returns how many rows
-- it deleted.
CREATE OR REPLACE FUNCTION {schema}.{sweep}() RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    s       record;
    swept   integer := 0;
BEGIN
    FOR s IN SELECT t.key FROM {schema}.{table} t
              WHERE t.forget_at < clock_timestamp()
                AND {schema}.{waits}(t.waiting, clock_timestamp()) = '{}'::jsonb
              LIMIT 100 LOOP
        -- The id the client computes (sql.rs, advisory_id): SHA-256's first 8 bytes.
        IF pg_try_advisory_xact_lock(('x' || encode(substring(
               sha256(convert_to({lock_prefix} || s.key, 'UTF8')) FROM 1 FOR 8), 'hex')
               )::bit(64)::bigint) THEN
            DELETE FROM {schema}.{table} t
             WHERE t.key = s.key AND t.forget_at < clock_timestamp()
               AND {schema}.{waits}(t.waiting, clock_timestamp()) = '{}'::jsonb;
            IF FOUND THEN
                swept := swept + 1;
            END IF;
        END IF;
    END LOOP;
    RETURN swept;
END
$fn$;

-- p_op: obtain | prolong | release | inspect | force | sweep, or wait | unwait (a process
-- starts, or renews, or stops waiting for the key's release notifications: p_token is then
-- the backend's id, p_ttl_ms the lease).
-- p_lock: the advisory lock id of p_key (64 bits of SHA-256, computed by the client). Two
-- keys with the same id only wait for each other's statements; their rows stay separate.
-- p_deadline_ms: the call's deadline; p_durable: false to commit without waiting for the
-- WAL flush.
-- Answers one row: o_outcome and, as the outcome needs them, o_ms (remaining ttl or
-- cooldown), o_holder (JSON), o_fencing, o_holds. Or, having done nothing, o_outcome
-- 'settings' (see below) or 'defer' (the row holds shares or a live writer's marker: the
-- client decides it, see the table's comment).
CREATE OR REPLACE FUNCTION {schema}.{fn}(
    p_op text, p_key text, p_lock bigint, p_token text,
    p_ttl_ms bigint, p_grace_ms bigint, p_holder text, p_delay_ms bigint,
    p_deadline_ms bigint, p_durable boolean)
RETURNS TABLE (o_outcome text, o_ms bigint, o_holder text, o_fencing bigint, o_holds integer)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    now_ts  timestamptz;
    r       {schema}.{table}%ROWTYPE;
    phase   text;
    ours    boolean := false;
    f       bigint;
    keep    interval := interval '1 day';
BEGIN
    -- What this call needs of the session's settings, whatever the server, the database or
    -- the role set: READ COMMITTED, so that the SELECT below sees what the statement it
    -- waited for committed; and no statement_timeout shorter than the call's deadline.
    -- Neither can be changed from inside the statement: without them the answer is
    -- 'settings', and the client sends the call again behind SET TRANSACTION / SET LOCAL
    -- (sql.rs, Names::preamble).
    IF current_setting('transaction_isolation') <> 'read committed'
       OR (current_setting('statement_timeout')::interval > interval '0'
           AND current_setting('statement_timeout')::interval
               < p_deadline_ms * interval '1 millisecond') THEN
        o_outcome := 'settings';
        RETURN NEXT;
        RETURN;
    END IF;
    -- These can, until the statement's transaction ends: waits for a lock end with the
    -- deadline (whatever lock_timeout says), and the commit waits for the WAL flush only
    -- when asked not to. A durable call raises synchronous_commit = off (a role's or a
    -- database's) to local, the least that flushes the WAL before the commit returns, and
    -- keeps any stronger level (on, remote_write, remote_apply) it finds.
    PERFORM set_config('lock_timeout', p_deadline_ms::text, true);
    IF NOT p_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    ELSIF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;

    IF p_op = 'sweep' THEN
        o_outcome := 'swept';
        o_ms := {schema}.{sweep}();
        RETURN NEXT;
        RETURN;
    END IF;

    -- Every statement on this key waits here for the one before it to commit.
    PERFORM pg_advisory_xact_lock(p_lock);
    -- The clock is read after that wait, never before: a call that queued past the lock's
    -- expiry must see it expired. (The client runs every call at READ COMMITTED, so the
    -- SELECT below also sees what the statement it waited for committed.)
    now_ts := clock_timestamp();

    SELECT * INTO r FROM {schema}.{table} t WHERE t.key = p_key;
    -- Shared holds, or a writer waiting for them: the client decides (storage.rs), in a
    -- transaction of its own; this call writes nothing.
    IF FOUND AND p_op NOT IN ('wait', 'unwait')
       AND (r.state = 'shared'
            OR (r.writer IS NOT NULL AND ('epoch'::timestamptz
                + (r.writer->>'until')::bigint * interval '1 microsecond') > now_ts)) THEN
        o_outcome := 'defer';
        RETURN NEXT;
        RETURN;
    END IF;
    IF NOT FOUND OR r.state = 'free' OR r.forget_at <= now_ts THEN
        phase := 'free';
    ELSIF r.state = 'cooling' THEN
        phase := 'cooling';
    ELSE
        ours := r.token = p_token;
        phase := CASE WHEN r.expires_at > now_ts THEN 'live' ELSE 'expired' END;
    END IF;

    IF p_op = 'wait' OR p_op = 'unwait' THEN
        -- Under the key's lock, like a release: a release either sees the entry of a waiter
        -- that is subscribed already, or commits before the waiter's next attempt, which
        -- then finds the lock free. No row (swept, or the table emptied): a free one is
        -- made to carry the entry (fencing 0 is below any token: the next grant is floored
        -- at the clock as on a missing row). Ended leases are dropped on the way. Nothing
        -- depends on this write surviving a crash.
        PERFORM set_config('synchronous_commit', 'off', true);
        IF p_op = 'wait' THEN
            INSERT INTO {schema}.{table} AS t
                   (key, state, fencing, expires_at, forget_at, waiting)
            VALUES (p_key, 'free', 0, now_ts, now_ts,
                    jsonb_build_object(p_token, now_ts + p_ttl_ms * interval '1 millisecond'))
            ON CONFLICT (key) DO UPDATE
               SET waiting = {schema}.{waits}(t.waiting, now_ts) || EXCLUDED.waiting;
        ELSE
            UPDATE {schema}.{table} t
               SET waiting = {schema}.{waits}(t.waiting, now_ts) - p_token
             WHERE t.key = p_key;
        END IF;
        o_outcome := p_op;
        RETURN NEXT;
        RETURN;
    END IF;

    IF p_op = 'inspect' OR p_op = 'force' THEN
        IF phase = 'cooling' THEN
            o_outcome := 'cooling';
            o_ms := ceil(extract(epoch FROM r.expires_at - now_ts) * 1000);
        ELSIF phase = 'live' THEN
            o_outcome := 'held';
            o_ms := ceil(extract(epoch FROM r.expires_at - now_ts) * 1000);
            o_holder := r.holder; o_fencing := r.fencing; o_holds := r.holds;
        ELSE
            o_outcome := 'free';
        END IF;
        IF p_op = 'force' AND FOUND THEN
            UPDATE {schema}.{table} t
               SET state = 'free', token = NULL, holder = NULL, holds = NULL,
                   expires_at = now_ts, forget_at = now_ts + keep
             WHERE t.key = p_key;
            -- A forced release wakes every waiter (rules::force; since op_v7: it woke one).
            IF r.waiters > 0 OR (r.waiting <> '{}'::jsonb
                                AND {schema}.{waits}(r.waiting, now_ts) <> '{}'::jsonb) THEN
                PERFORM pg_notify({channel_all}, p_key);
            END IF;
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;

    IF p_op = 'obtain' THEN
        IF phase = 'cooling' THEN
            o_outcome := 'busy';
            o_ms := ceil(extract(epoch FROM r.expires_at - now_ts) * 1000);
        ELSIF phase = 'live' AND NOT ours THEN
            o_outcome := 'busy';
            o_ms := ceil(extract(epoch FROM r.expires_at - now_ts) * 1000);
            o_holder := r.holder;
        ELSIF phase = 'live' THEN
            UPDATE {schema}.{table} t
               SET holds = t.holds + 1,
                   expires_at = now_ts + p_ttl_ms * interval '1 millisecond',
                   forget_at = now_ts + (p_ttl_ms + p_grace_ms) * interval '1 millisecond'
             WHERE t.key = p_key
            RETURNING t.holds INTO o_holds;
            PERFORM {schema}.{check}(FOUND);
            o_outcome := 'reacquired';
        ELSE
            -- Above the key's last token, and never below the server's clock in
            -- microseconds: tokens keep growing after the row is swept or the table is
            -- lost (this assumes the server's clock never goes back).
            f := greatest(coalesce(r.fencing, 0) + 1,
                          floor(extract(epoch FROM now_ts) * 1000000)::bigint);
            INSERT INTO {schema}.{table} AS t
                   (key, state, token, holder, fencing, holds, expires_at, forget_at)
            VALUES (p_key, 'held', p_token, p_holder, f, 1,
                    now_ts + p_ttl_ms * interval '1 millisecond',
                    now_ts + (p_ttl_ms + p_grace_ms) * interval '1 millisecond')
            ON CONFLICT (key) DO UPDATE
               SET state = EXCLUDED.state, token = EXCLUDED.token, holder = EXCLUDED.holder,
                   fencing = EXCLUDED.fencing, holds = 1, expires_at = EXCLUDED.expires_at,
                   forget_at = EXCLUDED.forget_at;
            o_outcome := 'acquired';
            o_fencing := f;
            -- Now and then, sweep rows past their grace period or their day of memory.
            IF random() < 0.01 THEN
                PERFORM {schema}.{sweep}();
            END IF;
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;

    IF NOT ours OR phase NOT IN ('live', 'expired') THEN
        o_outcome := 'lost';
        RETURN NEXT;
        RETURN;
    END IF;

    IF p_op = 'prolong' THEN
        UPDATE {schema}.{table} t
           SET expires_at = now_ts + p_ttl_ms * interval '1 millisecond',
               forget_at = now_ts + (p_ttl_ms + p_grace_ms) * interval '1 millisecond'
         WHERE t.key = p_key;
        PERFORM {schema}.{check}(FOUND);
        o_outcome := CASE WHEN phase = 'live' THEN 'prolonged' ELSE 'prolonged_late' END;
    ELSIF p_op = 'release' THEN
        IF phase = 'live' AND r.holds > 1 THEN
            UPDATE {schema}.{table} t SET holds = t.holds - 1 WHERE t.key = p_key
            RETURNING t.holds INTO o_holds;
            PERFORM {schema}.{check}(FOUND);
            o_outcome := 'decremented';
        ELSE
            IF p_delay_ms > 0 THEN
                UPDATE {schema}.{table} t
                   SET state = 'cooling', token = NULL, holder = NULL, holds = NULL,
                       expires_at = now_ts + p_delay_ms * interval '1 millisecond',
                       forget_at = now_ts + p_delay_ms * interval '1 millisecond'
                 WHERE t.key = p_key;
                PERFORM {schema}.{check}(FOUND);
            ELSE
                UPDATE {schema}.{table} t
                   SET state = 'free', token = NULL, holder = NULL, holds = NULL,
                       expires_at = now_ts, forget_at = now_ts + keep
                 WHERE t.key = p_key;
                PERFORM {schema}.{check}(FOUND);
            END IF;
            -- pg_notify takes a lock that serializes every notifying commit of the cluster
            -- until its WAL is flushed: only when some process waits. ({waits} is a SQL
            -- function, parsed and planned again at every call: not called on an empty
            -- `waiting`, the common case, where it could only answer '{}'. Since op_v6.)
            IF r.waiters > 0 OR (r.waiting <> '{}'::jsonb
                                AND {schema}.{waits}(r.waiting, now_ts) <> '{}'::jsonb) THEN
                PERFORM pg_notify({channel}, p_key);
            END IF;
            o_outcome := CASE WHEN phase = 'live' THEN 'released' ELSE 'released_late' END;
        END IF;
    ELSE
        RAISE EXCEPTION 'unknown lock operation %', p_op USING ERRCODE = '22023';
    END IF;
    RETURN NEXT;
END
$fn$;
