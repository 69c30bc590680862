//! Every statement the backend sends, in the order an operation sends them. Read this file
//! top to bottom to know what reaches the server.
//!
//! An obtain, prolong or release of an exclusive hold is one `CALL` of the table's
//! procedure (`sql/procedure.sql`, [`Names::call`]): one message, one round trip, the
//! transaction and the decision on the server, held to the same decision table as
//! lock-core's rules. It answers `defer` for a row it does not decide (shared holds, a
//! waiting writer's marker), and the operation then goes the way below. So does every
//! other operation, and every operation of a backend whose procedure is missing or may not
//! be called (see `migrate.rs`).
//!
//! The way below is one transaction on one pooled connection, two messages, each a few
//! statements in one text (the MySQL protocol's multi-statements, one round trip each):
//!
//! 1. [`Session::preamble`]: `START TRANSACTION` (after pinning the session, on a pool
//!    that is not the backend's own); an obtain then makes
//!    sure the key's row exists and holds its lock ([`Names::read_one`]:
//!    `INSERT … ON DUPLICATE KEY UPDATE`, which takes the row's exclusive lock whether it
//!    inserted or found it); then the row, read with `FOR UPDATE`, and, in a statement of
//!    its own after the lock was granted, the server's clock ([`CLOCK`]).
//! 2. lock-core's rules decide in the client on that row at that instant; the message is
//!    the row they write and `COMMIT` ([`Names::write`]), or, when they write nothing,
//!    `ROLLBACK` ([`ROLLBACK`]: a new key's inserted free row goes too).
//!
//! A batch of prolongs reads all its rows in one `SELECT … WHERE key IN (…) ORDER BY key
//! FOR UPDATE` (primary-key order: two batches never wait for each other in a cycle) and
//! writes them in multi-row `INSERT`s of at most [`MESSAGE_BUDGET`] bytes each, one message
//! each, the last with `COMMIT`: a row of a read lock carries every share's holder (up to
//! 4 KiB of metadata each, hex-encoded), and one message of 200 such rows went past the
//! server's `max_allowed_packet` (error 1153), failing the whole batch. A sweep reads old rows with `SKIP LOCKED` and
//! deletes those the rules call forgotten.
//!
//! Values are never spliced in raw: byte strings travel as hex literals (`X'6b6579'`),
//! which no `sql_mode` (`NO_BACKSLASH_ESCAPES`, `ANSI_QUOTES`) or character set can
//! reinterpret, numbers as decimal digits, identifiers in backquotes after a check that
//! they are plain names. Every read is a locking read (`FOR UPDATE`), which sees the latest
//! committed row at any isolation level; the session is still pinned to READ COMMITTED so
//! that a read of a missing row takes no gap lock.
//!
//! Whatever logs statements (sqlx at DEBUG, its slow statement WARN, the server's general
//! or slow query log) may see the values: so the owner token never goes out, only its
//! SHA-256 (`Token::digest`), which the table stores instead.

use std::fmt::Write;
use std::time::Duration;

use lock_core::backend::rules::columns::Columns;

const SCHEMA: &str = include_str!("sql/schema.sql");
const PROCEDURE: &str = include_str!("sql/procedure.sql");

/// The procedure's name after the table's, with the version its body last changed in (see
/// the top of `procedure.sql`).
const PROCEDURE_VERSION: &str = "op_v2";

/// The server's clock in µs since the epoch, read when the statement runs (`SYSDATE`, not
/// `NOW`, which is the statement's start in MySQL and the routine's start inside one; in a
/// statement after the one that took the row lock, both are after the wait). Under
/// `--sysdate-is-now` `SYSDATE` is `NOW`: still read after the lock, since the lock is
/// taken by the statement before. The session's `time_zone` is UTC ([`Session`]), so the
/// conversion has no daylight saving hour to misread.
pub(crate) const CLOCK: &str = "CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)";

/// The columns every read returns after the key, in this order (see `read.rs`).
const COLUMNS: &str = "state, token, holder, fencing, holds, expires_us, forget_us, shares, writer";

/// How many rows a sweep looks at in one transaction.
pub(crate) const SWEEP_ROWS: u32 = 100;

/// The lock table's name, already checked to be a plain lowercase identifier.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// As given.
    pub(crate) table: String,
    /// `` `table` ``.
    quoted: String,
    /// `INSERT INTO … (columns) VALUES`: the head of a write, made once.
    insert: String,
    /// `ON DUPLICATE KEY UPDATE` every column: the tail of a write, made once.
    update: String,
    /// The procedure's name, as given (`table_op_v2`).
    pub(crate) procedure: String,
}

impl Names {
    /// `None` unless `table` matches `[a-z_][a-z0-9_]{0,47}`.
    pub(crate) fn new(table: &str) -> Option<Self> {
        let ok = lock_sql::sql_file::plain_identifier(table);
        let update: Vec<String> = COLUMNS
            .split(", ")
            .map(|c| format!("{c} = VALUES({c})"))
            .collect();
        ok.then(|| Names {
            procedure: format!("{table}_{PROCEDURE_VERSION}"),
            quoted: format!("`{table}`"),
            insert: format!("INSERT INTO `{table}` (`key`, {COLUMNS}) VALUES"),
            update: format!("ON DUPLICATE KEY UPDATE {}", update.join(", ")),
            table: table.to_owned(),
        })
    }

    /// `schema.sql` for this table.
    pub(crate) fn migration(&self) -> String {
        SCHEMA.replace("{table}", &self.quoted)
    }

    /// `procedure.sql` for this table: `CREATE PROCEDURE IF NOT EXISTS`, one statement.
    pub(crate) fn procedure_migration(&self) -> String {
        PROCEDURE
            .replace("{table}", &self.quoted)
            .replace("{proc}", &format!("`{}`", self.procedure))
    }

    /// One call of the procedure (see `procedure.sql` for what each value is): the
    /// session's settings first when the connections are not pinned, then the `CALL`.
    pub(crate) fn call(&self, session: &Session, call: &Call<'_>) -> String {
        let text = |v: Option<&str>| v.map_or("NULL".into(), |s| hex(s.as_bytes()));
        format!(
            "{}CALL `{}`('{}', {}, {}, {}, {}, {}, {})",
            session.before_call,
            self.procedure,
            call.op.word(),
            hex(call.key.as_bytes()),
            hex(call.token.as_bytes()),
            text(call.holder),
            call.ttl_us,
            call.grace_us,
            call.delay_us,
        )
    }

    /// The columns and types of the table, and its engine, in the connection's database.
    pub(crate) fn shape_query(&self) -> String {
        format!(
            "SELECT CAST(c.COLUMN_NAME AS CHAR), CAST(c.COLUMN_TYPE AS CHAR), CAST(t.ENGINE AS CHAR) \
             FROM information_schema.COLUMNS c JOIN information_schema.TABLES t \
             ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
             WHERE c.TABLE_SCHEMA = DATABASE() AND c.TABLE_NAME = {} ORDER BY c.ORDINAL_POSITION",
            hex(self.table.as_bytes())
        )
    }

    /// Message 1 of one operation on `key`: the preamble, the row (made first when
    /// `create`, for an obtain), the clock.
    pub(crate) fn read_one(&self, session: &Session, key: &str, create: bool) -> String {
        let key = hex(key.as_bytes());
        let mut sql = session.preamble.clone();
        if create {
            // A free row with fencing 0 (the rules floor a grant at the clock): the insert
            // or the duplicate's no-op update takes the row's exclusive lock either way, so
            // two obtains of a new key wait for each other as on an old one.
            let _ = write!(
                sql,
                "INSERT INTO {t} (`key`, state, fencing, expires_us, forget_us) \
                 VALUES ({key}, 'free', 0, 0, 0) ON DUPLICATE KEY UPDATE `key` = `key`; ",
                t = self.quoted
            );
        }
        let _ = write!(
            sql,
            "SELECT `key`, {COLUMNS} FROM {t} WHERE `key` = {key} FOR UPDATE; SELECT {CLOCK}",
            t = self.quoted
        );
        sql
    }

    /// Message 1 of a batch of prolongs: every row of `keys` in primary-key order, then the
    /// clock.
    pub(crate) fn read_many<'k>(
        &self,
        session: &Session,
        keys: impl Iterator<Item = &'k str>,
    ) -> String {
        let list: Vec<String> = keys.map(|k| hex(k.as_bytes())).collect();
        format!(
            "{}SELECT `key`, {COLUMNS} FROM {t} WHERE `key` IN ({}) ORDER BY `key` FOR UPDATE; \
             SELECT {CLOCK}",
            session.preamble,
            list.join(", "),
            t = self.quoted
        )
    }

    /// One page of a listing: up to `limit` keys under `prefix` past `after`, in byte order
    /// (`VARBINARY`), through the primary key's range; rows that keep only a fencing token
    /// (`free`, no writer's marker) and the library's own names (below `X'02'`) left out. No lock taken, no transaction: a plain read.
    pub(crate) fn list_keys(&self, prefix: &str, after: Option<&str>, limit: usize) -> String {
        let mut sql = format!(
            "SELECT `key` FROM {t} WHERE (state <> 'free' OR writer IS NOT NULL) \
             AND `key` >= {lower} AND `key` >= X'02'",
            t = self.quoted,
            lower = hex(prefix.as_bytes())
        );
        if let Some(upper) = lock_core::backend::listing::prefix_end(prefix.as_bytes()) {
            let _ = write!(sql, " AND `key` < {}", hex(&upper));
        }
        if let Some(after) = after {
            let _ = write!(sql, " AND `key` > {}", hex(after.as_bytes()));
        }
        let _ = write!(sql, " ORDER BY `key` LIMIT {limit}");
        sql
    }

    /// Message 1 of a sweep: up to [`SWEEP_ROWS`] rows past their `forget_us`, oldest
    /// first, skipping every row another transaction holds (an operation on it is under
    /// way), then the clock.
    pub(crate) fn read_old(&self, session: &Session) -> String {
        format!(
            "{}SELECT `key`, {COLUMNS} FROM {t} WHERE forget_us < {CLOCK} \
             ORDER BY forget_us LIMIT {SWEEP_ROWS} FOR UPDATE SKIP LOCKED; SELECT {CLOCK}",
            session.preamble,
            t = self.quoted
        )
    }

    /// Message 2 when the rules write: the rows, and `COMMIT`; more than one message when
    /// the rows take more than [`MESSAGE_BUDGET`] bytes (a row larger than that alone goes
    /// in a message of its own), all in the transaction, `COMMIT` with the last.
    pub(crate) fn write<'r>(
        &self,
        rows: impl Iterator<Item = (&'r str, &'r Columns)>,
    ) -> Vec<String> {
        let values = rows.map(|(key, c)| {
            let text =
                |v: &Option<String>| v.as_deref().map_or("NULL".into(), |s| hex(s.as_bytes()));
            format!(
                "({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                hex(key.as_bytes()),
                hex(c.state.as_bytes()),
                text(&c.token),
                text(&c.holder),
                c.fencing,
                c.holds.map_or("NULL".into(), |h| h.to_string()),
                c.expires_us,
                c.forget_us,
                text(&c.shares),
                text(&c.writer),
            )
        });
        let fixed = self.insert.len() + self.update.len() + "  ; COMMIT".len();
        let mut messages = Vec::new();
        let mut batch: Vec<String> = Vec::new();
        let mut size = fixed;
        let flush = |batch: &mut Vec<String>, messages: &mut Vec<String>| {
            if !batch.is_empty() {
                messages.push(format!(
                    "{} {} {};",
                    self.insert,
                    batch.join(", "),
                    self.update
                ));
                batch.clear();
            }
        };
        for value in values {
            if !batch.is_empty() && size + value.len() + 2 > MESSAGE_BUDGET {
                flush(&mut batch, &mut messages);
                size = fixed;
            }
            size += value.len() + 2;
            batch.push(value);
        }
        flush(&mut batch, &mut messages);
        match messages.last_mut() {
            Some(last) => last.push_str(" COMMIT"),
            None => messages.push(COMMIT.to_owned()),
        }
        messages
    }

    /// Message 2 of a sweep: the rows the rules called forgotten (at most
    /// [`SWEEP_ROWS`] keys of at most 1 KiB: well under [`MESSAGE_BUDGET`]), and `COMMIT`.
    pub(crate) fn delete<'k>(&self, keys: impl Iterator<Item = &'k str>) -> Vec<String> {
        let list: Vec<String> = keys.map(|k| hex(k.as_bytes())).collect();
        if list.is_empty() {
            return vec![COMMIT.to_owned()];
        }
        vec![format!(
            "DELETE FROM {t} WHERE `key` IN ({}); COMMIT",
            list.join(", "),
            t = self.quoted
        )]
    }
}

/// What the procedure is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProcedureOp {
    Obtain,
    Prolong,
    Release,
}

impl ProcedureOp {
    /// `p_op`, as `procedure.sql` spells it.
    fn word(self) -> &'static str {
        match self {
            ProcedureOp::Obtain => "obtain",
            ProcedureOp::Prolong => "prolong",
            ProcedureOp::Release => "release",
        }
    }
}

/// One call of the procedure: its arguments, times in µs.
#[derive(Debug)]
pub(crate) struct Call<'a> {
    pub(crate) op: ProcedureOp,
    pub(crate) key: &'a str,
    /// The owner token's digest.
    pub(crate) token: &'a str,
    /// The holder's JSON (obtain).
    pub(crate) holder: Option<&'a str>,
    pub(crate) ttl_us: u64,
    pub(crate) grace_us: u64,
    pub(crate) delay_us: u64,
}

/// Message 2 of a batch when the rules write nothing.
pub(crate) const COMMIT: &str = "COMMIT";

/// Message 2 of one key's call when the rules write nothing: the free row an obtain of a
/// new key inserted to lock it goes too, so that nothing written leaves nothing behind (a
/// mode change answered `Lost` on a key with no row).
pub(crate) const ROLLBACK: &str = "ROLLBACK";

/// The most bytes of rows one message of a write carries: 1 MiB less 1 KiB for the
/// packet's own bytes, under every server's
/// `max_allowed_packet` as shipped (MariaDB 10.2 and later: 16 MiB; MySQL 8: 64 MiB; 1 MiB
/// or 4 MiB before) while costing no extra round trip for any batch but one of very large
/// rows. A single row over the server's limit cannot be written at all: its call fails
/// (retry-safe, nothing written) rather than a whole batch of others with it.
pub(crate) const MESSAGE_BUDGET: usize = (1 << 20) - 1024;

/// What every transaction needs of its session, whatever the server's or the user's
/// settings: UTC for the clock, READ COMMITTED, and the call's deadline on the server's
/// side too: a wait for a row lock (`innodb_lock_wait_timeout`) or the table's metadata
/// lock (`lock_wait_timeout`) ends by it, and on MariaDB so does any statement
/// (`max_statement_time`, in a `/*M! */` comment that only MariaDB runs; MySQL's
/// `max_execution_time` covers only SELECTs and is left alone).
///
/// On the backend's own pool (built from a URL) each connection is pinned once, when it
/// connects ([`Session::settings`]), and nothing else uses it. On a pool of the caller's
/// ([`MySqlBackend::builder_on`](crate::MySqlBackend::builder_on)), whose connections
/// other code may change between two calls, message 1 of every transaction pins them
/// first, and the connections keep them.
#[derive(Debug)]
pub(crate) struct Session {
    /// The settings, as statements.
    pub(crate) settings: String,
    /// What message 1 starts with: the settings unless pinned on connect, then
    /// `START TRANSACTION`.
    pub(crate) preamble: String,
    /// What a procedure's `CALL` follows in its message: the settings unless pinned on
    /// connect (the procedure starts its own transaction).
    pub(crate) before_call: String,
}

impl Session {
    /// `pinned`: every connection ran [`Session::settings`] when it connected.
    pub(crate) fn new(deadline: Duration, pinned: bool) -> Self {
        // Lock waits take whole seconds (at least 1).
        let whole = deadline.as_secs() + u64::from(deadline.subsec_nanos() > 0);
        let whole = whole.clamp(1, 3600);
        let exact = deadline.as_secs_f64().clamp(0.001, 3600.0);
        let settings = format!(
            "SET SESSION time_zone = '+00:00', innodb_lock_wait_timeout = {whole}, \
             lock_wait_timeout = {whole} /*M!, max_statement_time = {exact:.3} */; \
             SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; "
        );
        let before_call = if pinned {
            String::new()
        } else {
            settings.clone()
        };
        let preamble = format!("{before_call}START TRANSACTION; ");
        Session {
            settings,
            preamble,
            before_call,
        }
    }
}

/// `X'…'`: bytes as a hex literal, which cannot be misread whatever they hold.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2 + 3);
    s.push_str("X'");
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s.push('\'');
    s
}

#[cfg(test)]
mod tests;
