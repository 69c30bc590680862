//! Running transactions: message 1 (read under the row locks), the rules, message 2 (write
//! and commit), on one pooled connection, all by the backend's deadline.
//!
//! # Cancel safety
//! A transaction cut off by the deadline or a cancelled caller leaves its connection open
//! mid-transaction: the connection is closed rather than returned to the pool, and the
//! server rolls the transaction back (nothing half-written; the row locks go with it). A
//! statement still waiting for a row lock on the server ends by the server's own copy of
//! the deadline (`innodb_lock_wait_timeout`, see `sql.rs`).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_core::future::BoxFuture;
use lock_core::backend::rules;
use lock_core::backend::rules::columns::Columns;
use lock_core::backend::{Cursor, Grace, KeyPage, KeysRequest};
use lock_core::{Operation, Result};
use lock_sql::reply::Reply;
use lock_sql::SchemaOnce;
use sqlx::mysql::MySqlRow;
use sqlx::Row as _;
use tracing::Instrument;

use crate::error::{
    is_broken_connection, is_missing_table, is_unusable_procedure, map_error, protocol,
};
use crate::read::{Read, Stored};
use crate::sql::{Call, Names, Session, COMMIT};
use crate::NAME;

/// What every transaction of a backend needs, shared by its clones.
pub(crate) struct Db {
    /// The pool and the deadline of one call.
    pub(crate) pooled: lock_sql::Pooled<sqlx::MySql>,
    pub(crate) names: Names,
    pub(crate) session: Session,
    pub(crate) grace: Option<Grace>,
    /// Make the table when it is missing, rather than only check.
    pub(crate) auto_migrate: bool,
    /// The table was found or made, once.
    pub(crate) schema: SchemaOnce,
    /// A sweep is under way (one at a time).
    pub(crate) sweeping: AtomicBool,
    /// This process's waiters, woken by this backend's releases (the server sends no
    /// notifications: waiters in other processes poll).
    pub(crate) waiters: lock_core::backend::Waiters,
    /// Exclusive holds go through the table's procedure (one round trip); false once the
    /// procedure was found missing or not ours to call (see `migrate.rs`), and every
    /// operation then decides in the client (two).
    pub(crate) procedure: AtomicBool,
    /// The builder left the procedure on (not `decide_in_client`): a migration that makes
    /// it turns it back on after a fallback.
    pub(crate) wants_procedure: bool,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The pool's options hold the password: only names are shown.
        f.debug_struct("MySqlBackend")
            .field("table", &self.names.table)
            .field("grace", &self.grace)
            .field("timeout", &self.pooled.deadline.timeout)
            .field("auto_migrate", &self.auto_migrate)
            .finish_non_exhaustive()
    }
}

/// What follows message 1 of a transaction, given what it read: the answer, and the
/// messages to send in order (the write, if any, and `COMMIT` with the last). Called once
/// per transaction, so again if the transaction runs again (the table made anew).
pub(crate) type Plan<'p, T> = &'p mut (dyn FnMut(&Read) -> Result<(T, Vec<String>)> + Send);

impl Db {
    /// One call of the table's procedure by `deadline`, and its answer; `None` when this
    /// backend has no procedure to call (missing, or not ours to call: it then stops trying
    /// and says so once), and the caller decides in the client instead. The table made
    /// again and the call retried once if the table vanished, as for a transaction.
    pub(crate) async fn call(
        &self,
        op: Operation,
        call: &Call<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Reply>> {
        if !self.procedure.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let span = tracing::debug_span!("mysql_lock", op = op.as_str(), key = call.key);
        let sql = self.names.call(&self.session, call);
        // A procedure missing or not ours to call is passed through, not failed: the
        // caller decides in the client instead.
        let mut text = sql.as_str();
        let called = lock_sql::with_schema(self, op, deadline, &mut text, |db, sql| {
            Box::pin(async move {
                match db.call_once(sql).await {
                    Err(e) if is_unusable_procedure(&e) => Ok(Err(e)),
                    other => other.map(Ok),
                }
            })
        });
        let rows = match called.instrument(span).await? {
            Ok(rows) => rows,
            Err(e) => {
                self.no_procedure(&e);
                return Ok(None);
            }
        };
        match rows.as_slice() {
            [row] => decode(op, row).map(Some),
            _ => Err(protocol(op, format!("{} rows for one call", rows.len()))),
        }
    }

    /// From now on, every operation decides in the client: the procedure is missing or may
    /// not be called (`e` says which). Said once, at WARN, with what to do.
    pub(crate) fn no_procedure(&self, e: &dyn fmt::Display) {
        if self.procedure.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                procedure = %self.names.procedure,
                error = %e,
                "the lock table's procedure cannot be used; every lock operation now takes two \
                 round trips instead of one (run migrate() as a user that may create routines, \
                 and grant this user EXECUTE on the procedure)"
            );
        }
    }

    /// The call's message on one connection, its rows. A call cut off mid-way closes its
    /// connection (the procedure may be inside its transaction: the server rolls it back).
    fn call_once<'a>(
        &'a self,
        sql: &'a str,
    ) -> BoxFuture<'a, std::result::Result<Vec<MySqlRow>, sqlx::Error>> {
        Box::pin(async move {
            let mut tx = self.pooled.open().await?;
            let rows = fetch_rows(&mut tx.conn, sql).await?;
            tx.open = false;
            Ok(rows)
        })
    }

    /// One page of the table's keys ([`Names::list_keys`]): a plain read on a pooled
    /// connection, no transaction, by [`lock_sql::list_page`].
    pub(crate) async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        req.validate()?;
        let after = req.cursor.map(Cursor::as_str);
        let sql = self.names.list_keys(req.prefix, after, req.limit + 1);
        lock_sql::list_page(self, req, &sql)
            .instrument(tracing::debug_span!("mysql_lock", op = "list"))
            .await
    }

    /// Deletes up to [`crate::sql::SWEEP_ROWS`] rows that the rules call forgotten, skipping
    /// rows in use; how many it deleted.
    pub(crate) async fn sweep(&self) -> Result<u64> {
        let op = Operation::Inspect;
        let read = self.names.read_old(&self.session);
        let mut plan = |read: &Read| {
            let old: Vec<&str> = read
                .rows
                .iter()
                .filter(|(_, r)| rules::forgotten(r, read.clock()))
                .map(|(k, _)| k.as_str())
                .collect();
            Ok((old.len() as u64, self.names.delete(old.into_iter())))
        };
        self.transaction(op, &read, &mut plan)
            .instrument(tracing::debug_span!("mysql_lock", op = "sweep"))
            .await
    }

    /// One transaction by the deadline, with the table in place ([`lock_sql::with_schema`]:
    /// if it vanished under a running backend, made again once and the transaction run
    /// again).
    pub(crate) async fn transaction<T: Send>(
        &self,
        op: Operation,
        read: &str,
        plan: Plan<'_, T>,
    ) -> Result<T> {
        let deadline = self.pooled.deadline_from_now();
        let mut call = (read, plan);
        // Boxed: inside the adapter's and the routine kit's futures, the whole would be
        // too deep for the compiler's layout of `LockBackend`'s futures.
        Box::pin(lock_sql::with_schema(
            self,
            op,
            deadline,
            &mut call,
            |db, (read, plan)| db.run(op, read, &mut **plan),
        ))
        .await?
    }

    /// A failed call's error: the table missing (and not to be made) says what to run; a
    /// dead connection closes the idle ones too.
    fn failed(&self, op: Operation, e: sqlx::Error) -> lock_core::Error {
        if is_missing_table(&e) {
            self.schema.forget();
            return self.missing_table();
        }
        if is_broken_connection(&e) {
            self.pooled.discard_idle();
        }
        map_error(op, e)
    }

    /// The two messages on one connection. A failure of the decision itself (a corrupt
    /// row, a refused request) still commits the transaction, which wrote nothing.
    fn run<'a, T: Send>(
        &'a self,
        op: Operation,
        read: &'a str,
        plan: Plan<'a, T>,
    ) -> BoxFuture<'a, std::result::Result<Result<T>, sqlx::Error>> {
        Box::pin(async move {
            let mut tx = self.pooled.open().await?;
            let rows = fetch_rows(&mut tx.conn, read).await?;
            let commit = COMMIT.to_owned();
            let decided = Read::decode(op, &rows).and_then(|read| plan(&read));
            let end = match &decided {
                Ok((_, messages)) => messages.as_slice(),
                Err(_) => std::slice::from_ref(&commit),
            };
            for message in end {
                fetch_rows(&mut tx.conn, message).await?;
            }
            tx.open = false;
            Ok(decided.map(|(answer, _)| answer))
        })
    }
}

/// The procedure's row: outcome, remaining µs, holder, fencing, holds (`procedure.sql`).
fn decode(op: Operation, row: &MySqlRow) -> Result<Reply> {
    let text = |i: usize| -> std::result::Result<Option<String>, sqlx::Error> {
        let bytes: Option<Vec<u8>> = row.try_get(i)?;
        Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
    };
    let word = text(0).map_err(|e| protocol(op, e))?.unwrap_or_default();
    let mut reply = Reply::new(NAME, op, &word)?;
    let mut fill = || -> std::result::Result<(), sqlx::Error> {
        let us: Option<i64> = row.try_get(1)?;
        reply.remaining = us.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)));
        reply.holder = text(2)?;
        reply.fencing = row.try_get(3)?;
        reply.holds = row.try_get(4)?;
        Ok(())
    };
    fill().map_err(|e| protocol(op, e))?;
    Ok(reply)
}

/// The row that stores `record` at the read's instant.
pub(crate) fn row(record: &Stored, read: &Read) -> Columns {
    Columns::of(record, read.now_us)
}

/// One text of statements on one connection (the text protocol, which carries several
/// statements in one message): the rows of every result set, in order. The boxed future
/// keeps the backend's futures provably `Send`.
pub(crate) fn fetch_rows<'c>(
    conn: &'c mut sqlx::MySqlConnection,
    sql: &'c str,
) -> BoxFuture<'c, std::result::Result<Vec<MySqlRow>, sqlx::Error>> {
    sqlx::Executor::fetch_all(conn, sql)
}

impl lock_sql::Tables for Db {
    type Db = sqlx::MySql;

    fn pooled(&self) -> &lock_sql::Pooled<sqlx::MySql> {
        &self.pooled
    }
    fn schema(&self) -> &SchemaOnce {
        &self.schema
    }
    fn auto_migrate(&self) -> bool {
        self.auto_migrate
    }
    fn table(&self) -> String {
        self.names.table.clone()
    }
    async fn ensure_schema(&self, op: Operation) -> Result<()> {
        Db::ensure_schema(self, op).await
    }
    fn is_missing(e: &sqlx::Error) -> bool {
        is_missing_table(e)
    }
    fn failed(&self, op: Operation, e: sqlx::Error) -> lock_core::Error {
        Db::failed(self, op, e)
    }
    fn fetch<'c>(
        conn: &'c mut sqlx::MySqlConnection,
        sql: &'c str,
    ) -> BoxFuture<'c, std::result::Result<Vec<MySqlRow>, sqlx::Error>> {
        fetch_rows(conn, sql)
    }
    /// Keys are `VARBINARY`: bytes, which must be UTF-8.
    fn key_of(row: &MySqlRow) -> std::result::Result<String, sqlx::Error> {
        let bytes: Vec<u8> = row.try_get(0)?;
        String::from_utf8(bytes).map_err(|e| sqlx::Error::Decode(Box::new(e)))
    }
}
