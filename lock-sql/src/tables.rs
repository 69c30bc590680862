//! A backend's lock table as the generic code sees it ([`Tables`]), and what is written
//! once for both SQL backends on it: the schema loop of every call ([`with_schema`]:
//! ensure the table, run the call, and if the table vanished under a running backend,
//! make it again and run the call once more) and a page of the table's keys
//! ([`list_page`]). Each backend's dialect (its statements, its error codes, how it reads a
//! row) stays in its own crate.

use std::future::Future;

use futures_core::future::BoxFuture;
use lock_core::backend::{KeyPage, KeysRequest};
use lock_core::{Error, Operation, Result};
use tokio::time::Instant;

use crate::{Pooled, SchemaOnce};

/// A row of the backend's driver.
pub type Row<D> = <<D as Tables>::Db as sqlx::Database>::Row;

/// What the generic code needs of a backend's lock table: its pool, the schema made once,
/// and its dialect's answers.
pub trait Tables: Send + Sync {
    /// The sqlx driver.
    type Db: sqlx::Database;

    /// The pool, and the deadline of one call.
    fn pooled(&self) -> &Pooled<Self::Db>;

    /// Whether the table was found or made.
    fn schema(&self) -> &SchemaOnce;

    /// The backend makes its table when missing, rather than only check.
    fn auto_migrate(&self) -> bool;

    /// The table's name, for logs.
    fn table(&self) -> String;

    /// Makes the table (or checks it, without `auto_migrate`) unless it is known there.
    fn ensure_schema(&self, op: Operation) -> impl Future<Output = Result<()>> + Send;

    /// Whether `e` says the table (or its routine) is missing.
    fn is_missing(e: &sqlx::Error) -> bool;

    /// A failed call's error: a missing table that is not to be made says what to run
    /// (and is forgotten); a dead connection closes the idle ones too.
    fn failed(&self, op: Operation, e: sqlx::Error) -> Error;

    /// Runs `sql` (one text, possibly several statements) on `conn`: every row of every
    /// result set, in order.
    fn fetch<'c>(
        conn: &'c mut <Self::Db as sqlx::Database>::Connection,
        sql: &'c str,
    ) -> BoxFuture<'c, std::result::Result<Vec<Row<Self>>, sqlx::Error>>;

    /// The key in column 0 of a listing's row.
    ///
    /// # Errors
    /// A column that is not a key's text.
    fn key_of(row: &Row<Self>) -> std::result::Result<String, sqlx::Error>;
}

/// Runs `attempt` by `deadline` with the table in place: the table made or checked first;
/// if the attempt finds it missing (dropped under a running backend) and the backend makes
/// its table, made again and the attempt run once more (the rows are gone: holders hear
/// `Lost`, and fencing still grows, floored by the server's clock). `state` is what the
/// attempt borrows mutably each time (a decision to run on what it reads).
///
/// # Errors
/// [`Tables::failed`]'s error of the attempt, or of making the table; past the deadline a
/// retry-safe `Unavailable` naming it.
///
/// # Cancel safety
/// As the attempt's.
pub async fn with_schema<D, X, T>(
    db: &D,
    op: Operation,
    deadline: Instant,
    state: &mut X,
    attempt: impl for<'a> Fn(&'a D, &'a mut X) -> BoxFuture<'a, std::result::Result<T, sqlx::Error>>,
) -> Result<T>
where
    D: Tables,
    X: ?Sized,
{
    let pooled = db.pooled();
    pooled.within(op, deadline, db.ensure_schema(op)).await??;
    match pooled
        .within(op, deadline, attempt(db, &mut *state))
        .await?
    {
        Err(e) if D::is_missing(&e) && db.auto_migrate() => {
            tracing::warn!(table = %db.table(), "lock table missing, creating it again");
            db.schema().forget();
            pooled.within(op, deadline, db.ensure_schema(op)).await??;
            pooled
                .within(op, deadline, attempt(db, state))
                .await?
                .map_err(|e| db.failed(op, e))
        }
        other => other.map_err(|e| db.failed(op, e)),
    }
}

/// One page of the table's keys by `sql` (at most `req.limit + 1` names after the
/// request's cursor, in key order), by the backend's deadline: a plain read on a pooled
/// connection, no transaction. A missing table lists nothing (no key was ever locked)
/// unless the table is to be made, which then happens first.
///
/// # Errors
/// As any call's; a name that is not a key is a protocol error.
pub async fn list_page<D: Tables>(db: &D, req: KeysRequest<'_>, sql: &str) -> Result<KeyPage> {
    let op = Operation::List;
    let pooled = db.pooled();
    let deadline = pooled.deadline_from_now();
    let read = async {
        if db.auto_migrate() {
            db.ensure_schema(op).await?;
        }
        let mut conn = pooled
            .connection(deadline)
            .await
            .map_err(|e| db.failed(op, e))?;
        match D::fetch(&mut conn, sql).await {
            Ok(rows) => Ok(rows),
            Err(e) if D::is_missing(&e) => Ok(Vec::new()),
            Err(e) => Err(db.failed(op, e)),
        }
    };
    let rows = pooled.within(op, deadline, read).await??;
    let backend = pooled.deadline.backend;
    let names = rows
        .iter()
        .map(D::key_of)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| crate::errors::protocol(backend, op, e))?;
    crate::key_page(backend, names, req.limit)
}
