//! Sending statements: one operation, or one batch of prolongs, as one statement on a
//! pooled connection, by the backend's deadline, in the backend's form of statement.

use std::fmt;

use futures_core::future::BoxFuture;
use lock_core::backend::rules::Wake;
use lock_core::backend::{Cursor, Grace, KeyPage, KeysRequest, Waiters};
use lock_core::{Key, Operation, Result};
use lock_sql::{Pooled, SchemaOnce};
use sqlx::postgres::PgRow;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{is_broken_connection, is_missing_schema, map_error, protocol};
use crate::reply::{Reply, Word};
use crate::sql::{Args, Names, Prolongs, Session, Statements};

/// What every statement of a backend needs, shared by its clones: the pool, the table's
/// names, the settings each call pins, the deadline, and whether the table and its
/// functions were found (see `migrate.rs`).
pub(crate) struct Db {
    /// The pool and the deadline of one call.
    pub(crate) pooled: Pooled<sqlx::Postgres>,
    pub(crate) names: Names,
    pub(crate) session: Session,
    pub(crate) statements: Statements,
    pub(crate) grace: Option<Grace>,
    /// Make the table and functions when they are missing, rather than only check.
    pub(crate) auto_migrate: bool,
    /// The table and functions of this version were found or made, once.
    pub(crate) schema: SchemaOnce,
    /// Without notifications, this process's waiters, woken by this backend's releases.
    pub(crate) local: Option<Waiters>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The pool's options hold the password: only names are shown.
        f.debug_struct("PostgresBackend")
            .field("table", &self.table())
            .field("grace", &self.grace)
            .field("durable", &self.session.durable)
            .field("timeout", &self.pooled.deadline.timeout)
            .field("auto_migrate", &self.auto_migrate)
            .finish_non_exhaustive()
    }
}

impl Db {
    /// Without notifications, wakes this process's waiters of `key` the decision names, once
    /// its write committed. (With them, the `NOTIFY` of the write wakes every process's.)
    pub(crate) fn wake_local(&self, key: &Key, whom: Wake) {
        if let Some(local) = &self.local {
            local.wake(key.as_str(), whom);
        }
    }

    /// Runs one operation within the backend's deadline, in the backend's form of
    /// statement; in the simple form again if the prepared one answered that the session's
    /// settings need pinning first (see `sql.rs`).
    pub(crate) async fn call(
        &self,
        op: Operation,
        word: &str,
        key: &Key,
        args: Args<'_>,
    ) -> Result<Reply> {
        self.call_by(op, word, key, args, self.pooled.deadline_from_now())
            .await
    }

    /// [`Db::call`] by `deadline`: an operation that may go on in the client's path after a
    /// `defer` keeps one deadline for both.
    pub(crate) async fn call_by(
        &self,
        op: Operation,
        word: &str,
        key: &Key,
        args: Args<'_>,
        deadline: Instant,
    ) -> Result<Reply> {
        let span = tracing::debug_span!("postgres_lock", op = word, key = key.as_str());
        let call = Call {
            word,
            key: key.as_str(),
            args,
        };
        let mut replies = self
            .send(op, &Sql::One(&call), deadline)
            .instrument(span)
            .await?;
        match replies.pop() {
            Some(reply) if replies.is_empty() => Ok(reply),
            _ => Err(protocol(
                op,
                format!("{} rows for one call", replies.len() + 1),
            )),
        }
    }

    /// Sends `sql` by `deadline` in the backend's form of statement; in the simple form
    /// again if the prepared one answered that the session's settings need pinning first
    /// (see `sql.rs`).
    pub(crate) async fn send(
        &self,
        op: Operation,
        sql: &Sql<'_>,
        deadline: Instant,
    ) -> Result<Vec<Reply>> {
        let replies = self.attempt(op, sql, deadline, self.statements).await?;
        // Any row: a batch's rows each judge the session with what is left of the deadline.
        let settings = replies.iter().any(|r| r.outcome == Word::Settings);
        if settings && self.statements == Statements::Prepared {
            tracing::debug!(
                "the session's isolation level or statement_timeout differ from what a call \
                 needs: sending it again with them pinned"
            );
            return self.attempt(op, sql, deadline, Statements::Simple).await;
        }
        Ok(replies)
    }

    /// One try of `sql` in `form`, with the table in place ([`lock_sql::with_schema`]: if
    /// the table or function vanished under a running backend, they are made again once).
    async fn attempt(
        &self,
        op: Operation,
        sql: &Sql<'_>,
        deadline: Instant,
        form: Statements,
    ) -> Result<Vec<Reply>> {
        let rows =
            lock_sql::with_schema(self, op, deadline, &mut (sql, form), |db, (sql, form)| {
                db.statement(op, sql, deadline, *form)
            })
            .await?;
        rows.iter()
            .map(|row| crate::reply::decode(op, row))
            .collect()
    }

    /// One page of the table's keys ([`Names::list_keys`]): one plain statement on a
    /// pooled connection (through PgBouncer too), by [`lock_sql::list_page`].
    pub(crate) async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        req.validate()?;
        let after = req.cursor.map(Cursor::as_str);
        let sql = self.names.list_keys(req.prefix, after, req.limit + 1);
        lock_sql::list_page(self, req, &sql)
            .instrument(tracing::debug_span!("postgres_lock", op = "list"))
            .await
    }

    /// The error of a call that failed. After a broken connection every idle connection is
    /// closed first: the server that dropped one (a restart, `pg_terminate_backend`, a
    /// failover) dropped them all, and the caller's retry must get a fresh one.
    pub(crate) fn failed(&self, op: Operation, e: sqlx::Error) -> lock_core::Error {
        if is_missing_schema(&e) {
            self.schema.forget();
            return self.missing_schema();
        }
        if is_broken_connection(&e) {
            self.pooled.discard_idle();
        }
        map_error(op, e)
    }

    /// One statement on a pooled connection, by `deadline`. A connection whose statement
    /// ran out of time is closed, not returned: its reply may still be on the way.
    fn statement<'a>(
        &'a self,
        op: Operation,
        sql: &'a Sql<'a>,
        deadline: Instant,
        form: Statements,
    ) -> BoxFuture<'a, std::result::Result<Vec<PgRow>, sqlx::Error>> {
        Box::pin(async move {
            let mut conn = self.pooled.connection(deadline).await?;
            let text;
            let query = match (form, sql) {
                (Statements::Simple, Sql::One(call)) => {
                    text = self
                        .names
                        .call(&self.session, call.word, call.key, &call.args);
                    fetch_rows(&mut conn, &text)
                }
                (Statements::Simple, Sql::Prolongs(batch)) => {
                    text = self.names.prolongs(&self.session, batch);
                    fetch_rows(&mut conn, &text)
                }
                (Statements::Prepared, Sql::Prolongs(batch)) => {
                    let query = sqlx::query(&self.names.prepared_prolongs)
                        .bind(&batch.keys)
                        .bind(&batch.locks)
                        .bind(&batch.tokens)
                        .bind(&batch.ttls)
                        .bind(&batch.graces)
                        .bind(self.session.deadline_ms)
                        .bind(self.session.durable);
                    sqlx::Executor::fetch_all(&mut *conn, query)
                }
                (Statements::Prepared, Sql::One(call)) => {
                    let a = &call.args;
                    let ms = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                    let query = sqlx::query(&self.names.prepared)
                        .bind(call.word)
                        .bind(call.key)
                        .bind(self.names.lock_id(call.key))
                        .bind(a.token)
                        .bind(ms(a.ttl_ms))
                        .bind(ms(a.grace_ms))
                        .bind(a.holder)
                        .bind(ms(a.delay_ms))
                        .bind(self.session.deadline_ms)
                        .bind(self.session.durable);
                    sqlx::Executor::fetch_all(&mut *conn, query)
                }
            };
            match tokio::time::timeout_at(deadline, query).await {
                Ok(result) => result,
                Err(_) => {
                    conn.close_on_drop();
                    tracing::debug!(
                        op = op.as_str(),
                        "no answer by the deadline: closing the connection"
                    );
                    Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "no answer within the deadline of {:?} (PostgresBuilder::timeout / timeout=)",
                            self.pooled.deadline.timeout
                        ),
                    )))
                }
            }
        })
    }
}

/// What one statement carries.
pub(crate) enum Sql<'a> {
    /// One operation on one key.
    One(&'a Call<'a>),
    /// Prolongs of many keys, sorted by advisory lock id.
    Prolongs(&'a Prolongs),
}

/// One operation as the backend sends it.
pub(crate) struct Call<'a> {
    /// The function's name for it: `obtain`, `prolong`, …
    word: &'a str,
    key: &'a str,
    args: Args<'a>,
}

/// One statement on one connection, over the simple query protocol: a `&str` with no
/// arguments goes out as one `Query` message, like `raw_sql`, and the trait method's boxed
/// future keeps the backend's futures provably `Send` (`raw_sql`'s generic one does not).
pub(crate) fn fetch_rows<'c>(
    conn: &'c mut sqlx::PgConnection,
    sql: &'c str,
) -> BoxFuture<'c, std::result::Result<Vec<PgRow>, sqlx::Error>> {
    sqlx::Executor::fetch_all(conn, sql)
}

impl lock_sql::Tables for Db {
    type Db = sqlx::Postgres;

    fn pooled(&self) -> &Pooled<sqlx::Postgres> {
        &self.pooled
    }
    fn schema(&self) -> &SchemaOnce {
        &self.schema
    }
    fn auto_migrate(&self) -> bool {
        self.auto_migrate
    }
    fn table(&self) -> String {
        Db::table(self)
    }
    async fn ensure_schema(&self, op: Operation) -> Result<()> {
        Db::ensure_schema(self, op).await
    }
    fn is_missing(e: &sqlx::Error) -> bool {
        is_missing_schema(e)
    }
    fn failed(&self, op: Operation, e: sqlx::Error) -> lock_core::Error {
        Db::failed(self, op, e)
    }
    fn fetch<'c>(
        conn: &'c mut sqlx::PgConnection,
        sql: &'c str,
    ) -> BoxFuture<'c, std::result::Result<Vec<PgRow>, sqlx::Error>> {
        fetch_rows(conn, sql)
    }
    fn key_of(row: &PgRow) -> std::result::Result<String, sqlx::Error> {
        sqlx::Row::try_get(row, 0)
    }
}
