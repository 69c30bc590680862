//! `PostgresBackend`: the contract on Postgres.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_core::future::BoxFuture;
use tokio::time::Instant;

use async_trait::async_trait;
use lock_core::{
    Busy, Capabilities, Error, ErrorKind, Fencing, Grace, Key, LockBackend, LockState,
    ObtainOutcome, ObtainRequest, Operation, ProlongOutcome, ProlongRequest, ReleaseOutcome,
    ReleaseRequest, ReleaseSubscription, Result, Ttl,
};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracing::Instrument;

use crate::builder::PostgresBuilder;
use crate::error::{is_broken_connection, is_missing_schema, map_error, protocol};
use crate::notify::Notifier;
use crate::sql::{Args, Names, Prolongs, Session, Statements};

pub(crate) const NAME: &str = PostgresBackend::NAME;

/// Locks in a Postgres database: a transaction-scoped advisory lock serializes each
/// operation on a key, and a table holds the lock's state.
///
/// Each operation is one statement, one round trip, in its own transaction: holding a lock
/// pins no connection, and the backend works through PgBouncer in transaction mode. The
/// table and its function are created on first use, or up front with
/// [`PostgresBackend::migrate`]. Clones share the pool.
#[derive(Clone)]
pub struct PostgresBackend {
    pool: PgPool,
    names: Arc<Names>,
    grace: Option<Grace>,
    notifications: bool,
    durable: bool,
    timeout: Duration,
    auto_migrate: bool,
    /// What every call pins (see `Session`).
    session: Arc<Session>,
    statements: Statements,
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) migrated: AtomicBool,
    pub(crate) migrating: tokio::sync::Mutex<()>,
    pub(crate) notifier: Notifier,
    /// How many of this process's waiters wait for each key: the table lists the backend
    /// once per key (its id in the row's `waiting`), from the first to the last. An async
    /// mutex: an entry changes only together with the table's, in the order asked.
    pub(crate) waiting: tokio::sync::Mutex<HashMap<String, Waiting>>,
    /// This backend's id in the rows' `waiting` (random; not a secret: it grants nothing).
    pub(crate) waiter_id: String,
    pub(crate) application_name: String,
}

impl PostgresBackend {
    /// The backend's name in errors and reports.
    pub const NAME: &'static str = "postgres";
    /// The default schema of the lock table.
    pub const DEFAULT_SCHEMA: &'static str = "public";
    /// The default name of the lock table.
    pub const DEFAULT_TABLE: &'static str = "distlock";
    /// The default number of pooled connections when built from a URL.
    pub const DEFAULT_POOL_SIZE: u32 = 16;
    /// The default deadline of one call: see [`PostgresBuilder::timeout`].
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The most locks one statement of the watchdog's renewals carries. Each statement is
    /// one transaction that holds the advisory lock of every key it prolongs until it
    /// commits, and the server has room for `max_locks_per_transaction` (64 by default)
    /// times `max_connections` locks in all; 200 stays well inside that with a few
    /// batches in flight, and one statement of 200 takes about 15 ms of server time.
    pub const BATCH: usize = 200;

    /// A builder for a backend on `url` (`postgres://user[:password]@host[:port]/database`,
    /// with sqlx's options such as `sslmode=require`); see [`PostgresBuilder`] for the
    /// settings, and [`PostgresBuilder::from_url`] for a URL that carries them too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_postgres::PostgresBackend;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let backend = PostgresBackend::builder("postgres://app@db.internal/app")
    ///     .table("locks", "app_locks")
    ///     .timeout(Duration::from_secs(2))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> PostgresBuilder {
        PostgresBuilder::on_url(url.into())
    }

    /// A builder for a backend on an existing pool (its `pool_size` setting is ignored).
    pub fn builder_on(pool: PgPool) -> PostgresBuilder {
        PostgresBuilder::on_pool(pool)
    }

    /// A backend on `url` with every setting at its default. Nothing is sent until the
    /// first operation.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a malformed URL. A wrong password, a missing database or an
    /// unreachable server shows on the first operation (or [`PostgresBackend::migrate`]).
    pub fn connect(url: &str) -> Result<Self> {
        Self::builder(url).build()
    }

    /// A backend on an existing pool with every setting at its default.
    pub fn from_pool(pool: PgPool) -> Self {
        // Only the settings can fail to build, and the defaults are valid.
        Self::builder_on(pool)
            .build()
            .expect("the default settings are valid")
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn assemble(
        pool: PgPool,
        names: Names,
        grace: Option<Grace>,
        notifications: bool,
        durable: bool,
        timeout: Duration,
        auto_migrate: bool,
        statements: Statements,
        shared: Shared,
    ) -> Self {
        PostgresBackend {
            pool,
            names: Arc::new(names),
            grace,
            notifications,
            durable,
            timeout,
            auto_migrate,
            session: Arc::new(Session::new(timeout, durable)),
            statements,
            shared: Arc::new(shared),
        }
    }

    /// The pool the backend runs on.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The `application_name` of the backend's connections when built from a URL (as
    /// `pg_stat_activity` shows it), for operators and fault tests.
    pub fn application_name(&self) -> &str {
        &self.shared.application_name
    }

    /// `schema.table` of the lock table.
    pub fn table(&self) -> String {
        format!("{}.{}", self.names.schema, self.names.table)
    }

    /// Creates the schema, table and function if missing, and checks that an
    /// existing table has the expected shape. Idempotent; concurrent calls take turns.
    ///
    /// Bounded by the backend's deadline ([`PostgresBuilder::timeout`]), waiting for
    /// another migration included.
    ///
    /// # Errors
    /// [`ErrorKind::PermissionDenied`] when the user may not create them,
    /// [`ErrorKind::Config`] when a table of that name exists with another shape,
    /// [`ErrorKind::Unavailable`] past the deadline (nothing half-made stays: the migration
    /// is one transaction).
    ///
    /// # Cancel safety
    /// Cancel safe: the migration runs on a connection that is closed when it ends, so a
    /// migration cut off mid-way is rolled back by the server.
    pub async fn migrate(&self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        self.within(Operation::Connect, deadline, self.migrate_now())
            .await?
    }

    async fn migrate_now(&self) -> Result<()> {
        let op = Operation::Connect;
        let _turn = self.shared.migrating.lock().await;
        let migration = self.names.migration();
        let mut conn = self.pool.acquire().await.map_err(|e| map_error(op, e))?;
        // The migration is BEGIN ... COMMIT: a connection left in the middle of it by a
        // cancelled future must not go back to the pool. Closing it after a migration that
        // finished costs one reconnect, once per backend.
        conn.close_on_drop();
        sqlx::Executor::execute(&mut *conn, migration.as_str())
            .await
            .map_err(|e| map_error(op, e))?;
        drop(conn);
        self.check_shape().await?;
        self.shared.migrated.store(true, Ordering::Release);
        Ok(())
    }

    async fn check_shape(&self) -> Result<()> {
        const EXPECTED: [(&str, &str); 10] = [
            ("key", "text"),
            ("state", "text"),
            ("token", "text"),
            ("holder", "text"),
            ("fencing", "bigint"),
            ("holds", "integer"),
            ("expires_at", "timestamp with time zone"),
            ("forget_at", "timestamp with time zone"),
            ("waiters", "integer"),
            ("waiting", "jsonb"),
        ];
        let query = self.names.shape_query();
        let rows = sqlx::raw_sql(&query)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map_error(Operation::Connect, e))?;
        let found: Vec<(String, String)> = rows
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(|e| map_error(Operation::Connect, e))?;
        if found.is_empty() {
            return Err(self.missing_schema());
        }
        for (column, ty) in EXPECTED {
            match found.iter().find(|(c, _)| c == column) {
                Some((_, t)) if t == ty => {}
                other => {
                    let what = match other {
                        Some((_, t)) => format!("column {column} is {t}, not {ty}"),
                        None => format!("it has no column {column}"),
                    };
                    return Err(Error::new(
                        ErrorKind::Config,
                        NAME,
                        Operation::Connect,
                        format!(
                            "table {} exists but is not a lock table: {what}; choose another \
                             table name (table=schema.name, PostgresBuilder::table), or drop that table",
                            self.table()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    async fn ensure_schema(&self) -> Result<()> {
        if self.shared.migrated.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.auto_migrate {
            return self.migrate_now().await;
        }
        self.verify().await
    }

    /// Checks, without changing anything, that the table has the right shape and the
    /// function of this version exists.
    async fn verify(&self) -> Result<()> {
        self.check_shape().await?;
        let query = format!(
            "SELECT pg_catalog.to_regprocedure({}) IS NOT NULL",
            crate::sql::text(&self.names.function_signature())
        );
        let row = sqlx::raw_sql(&query)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| map_error(Operation::Connect, e))?;
        let found: bool = row
            .try_get(0)
            .map_err(|e| protocol(Operation::Connect, e))?;
        if !found {
            return Err(self.missing_schema());
        }
        self.shared.migrated.store(true, Ordering::Release);
        Ok(())
    }

    fn missing_schema(&self) -> Error {
        Error::new(
            ErrorKind::Config,
            NAME,
            Operation::Connect,
            format!(
                "the lock table {} or its function {} is missing (or from another version), \
                 and this backend does not create them (migrate=false): run migrate() once as \
                 a role that may create them, then grant this role USAGE on the schema, \
                 SELECT, INSERT, UPDATE, DELETE on the table and EXECUTE on the functions",
                self.table(),
                self.names.function_signature()
            ),
        )
    }

    /// Deletes up to 100 rows past their grace period (or their day of memory), skipping
    /// every row another statement is working on; returns how many it deleted. Obtains do
    /// this now and then by themselves; call it to tidy up a table nobody obtains from.
    ///
    /// # Errors
    /// As for any operation.
    pub async fn sweep(&self) -> Result<u64> {
        let reply = self
            .call(
                Operation::Inspect,
                "sweep",
                &Key::new("sweep")?,
                Args::default(),
            )
            .await?;
        Ok(u64::try_from(reply.ms.unwrap_or(0)).unwrap_or(0))
    }

    fn grace_ms(&self, ttl: Ttl) -> u64 {
        Grace::or_ttl(self.grace, ttl).as_millis()
    }

    /// Runs one operation within the backend's deadline, in the backend's form of
    /// statement; in the simple form again if the prepared one answered that the session's
    /// settings need pinning first (see `sql.rs`).
    async fn call(&self, op: Operation, word: &str, key: &Key, args: Args<'_>) -> Result<Reply> {
        let span = tracing::debug_span!("postgres_lock", op = word, key = key.as_str());
        let deadline = Instant::now() + self.timeout;
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

    /// Prolongs one batch of at most [`PostgresBackend::BATCH`] locks in one statement
    /// within the backend's deadline: the answers in the order of `reqs`.
    async fn prolong_batch(&self, reqs: &[ProlongRequest<'_>]) -> Result<Vec<ProlongOutcome>> {
        let op = Operation::Prolongate;
        // Sorted by advisory lock id: see `sql::Prolongs`.
        let mut order: Vec<(i64, usize)> = reqs
            .iter()
            .enumerate()
            .map(|(i, req)| (self.names.lock_id(req.key.as_str()), i))
            .collect();
        order.sort_unstable();
        let mut batch = Prolongs::default();
        let ms = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for &(lock, i) in &order {
            let req = &reqs[i];
            batch.keys.push(req.key.as_str().to_owned());
            batch.locks.push(lock);
            batch.tokens.push(req.token.digest());
            batch.ttls.push(ms(req.ttl.as_millis()));
            batch.graces.push(ms(self.grace_ms(req.ttl)));
        }
        let deadline = Instant::now() + self.timeout;
        let span = tracing::debug_span!("postgres_lock", op = "prolong_many", locks = reqs.len());
        let replies = self
            .send(op, &Sql::Prolongs(&batch), deadline)
            .instrument(span)
            .await?;
        if replies.len() != reqs.len() {
            return Err(protocol(
                op,
                format!("{} rows for {} prolongs", replies.len(), reqs.len()),
            ));
        }
        let mut answers = vec![ProlongOutcome::Lost; reqs.len()];
        for (&(_, i), reply) in order.iter().zip(&replies) {
            answers[i] = reply.prolong_outcome()?;
        }
        Ok(answers)
    }

    /// Sends `sql` by `deadline` in the backend's form of statement; in the simple form
    /// again if the prepared one answered that the session's settings need pinning first
    /// (see `sql.rs`).
    async fn send(&self, op: Operation, sql: &Sql<'_>, deadline: Instant) -> Result<Vec<Reply>> {
        let replies = self.attempt(op, sql, deadline, self.statements).await?;
        // Any row: a batch's rows each judge the session with what is left of the deadline.
        let settings = replies.iter().any(|r| r.outcome == "settings");
        if settings && self.statements == Statements::Prepared {
            tracing::debug!(
                "the session's isolation level or statement_timeout differ from what a call \
                 needs: sending it again with them pinned"
            );
            return self.attempt(op, sql, deadline, Statements::Simple).await;
        }
        Ok(replies)
    }

    /// One try of `sql` in `form`. If the table or function vanished (dropped under a
    /// running backend), makes them again once and retries: the rows are gone, so holders
    /// hear `Lost`, and fencing still grows (the server clock floors it).
    async fn attempt(
        &self,
        op: Operation,
        sql: &Sql<'_>,
        deadline: Instant,
        form: Statements,
    ) -> Result<Vec<Reply>> {
        self.within(op, deadline, self.ensure_schema()).await??;
        let rows = match self.statement(op, sql, deadline, form).await {
            Err(e) if is_missing_schema(&e) && self.auto_migrate => {
                tracing::warn!(table = %self.table(), "lock table missing, creating it again");
                self.shared.migrated.store(false, Ordering::Release);
                self.within(op, deadline, self.ensure_schema()).await??;
                self.statement(op, sql, deadline, form).await
            }
            Err(e) if is_missing_schema(&e) => {
                self.shared.migrated.store(false, Ordering::Release);
                return Err(self.missing_schema());
            }
            other => other,
        }
        .map_err(|e| {
            if is_broken_connection(&e) {
                self.discard_idle();
            }
            map_error(op, e)
        })?;
        rows.iter().map(|row| Reply::decode(op, row)).collect()
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
            let Ok(conn) = tokio::time::timeout_at(deadline, self.pool.acquire()).await else {
                return Err(sqlx::Error::PoolTimedOut);
            };
            let mut conn = conn?;
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
                            self.timeout
                        ),
                    )))
                }
            }
        })
    }

    /// Runs `fut` (schema checks) by `deadline`.
    async fn within<T>(
        &self,
        op: Operation,
        deadline: Instant,
        fut: impl std::future::Future<Output = T>,
    ) -> Result<T> {
        tokio::time::timeout_at(deadline, fut).await.map_err(|_| {
            Error::new(
                ErrorKind::Unavailable,
                NAME,
                op,
                format!(
                    "no answer within the deadline of {:?} (PostgresBuilder::timeout / timeout=); it is safe to retry",
                    self.timeout
                ),
            )
        })
    }
}

/// How long a backend stays listed as a waiter of a key after its last waiter left: a
/// process that waited for a key is likely to again (a worker that takes turns on a job),
/// and listing it in and out on every turn would put two statements on the key's lock per
/// hand-off. Meanwhile releases of the key notify for nothing, as they all did before
/// waiters were listed.
const LINGER: Duration = Duration::from_secs(1);

/// The lease of a backend's entry in a row's `waiting`: a process that dies (or drops the
/// backend without a runtime to take its entry out) leaves an entry that ends with it, and
/// the key's releases stop notifying for nothing.
const WAIT_LEASE: Duration = Duration::from_secs(30);

/// How often a backend with waiters of a key renews its entry. A row made again while they
/// wait (swept, or the table emptied by a TRUNCATE or a restore) lists the backend again
/// within this; meanwhile its waiters fall back to polling.
const WAIT_RENEWAL: Duration = Duration::from_secs(10);

/// This process's waiters of one key.
#[derive(Default)]
pub(crate) struct Waiting {
    /// Subscriptions alive now.
    count: usize,
    /// Bumped by each new subscription: a removal scheduled before it is void.
    generation: u64,
    /// Held while the entry lives: the renewal task of this entry (and no other) runs
    /// while it can upgrade its weak handle.
    _listed: Arc<()>,
}

impl PostgresBackend {
    /// Enters (or renews) this backend in `key`'s `waiting`, and returns once that is
    /// committed.
    async fn list_waiter(&self, key: &Key) -> Result<Reply> {
        let args = Args {
            token: Some(&self.shared.waiter_id),
            ttl_ms: WAIT_LEASE.as_secs() * 1000,
            ..Args::default()
        };
        self.call(Operation::Subscribe, "wait", key, args).await
    }

    /// Lists this process as a waiter of `key` unless it is listed already (then starts
    /// renewing its lease); returns once the entry is committed, so that a release after
    /// that point notifies.
    ///
    /// # Cancel safety
    /// Cut off while the entry goes out, the table may list the process with no waiter
    /// here: releases of that key then notify for nothing until the lease ends, never the
    /// other way round.
    async fn start_waiting(&self, key: &Key) -> Result<()> {
        let mut waiting = self.shared.waiting.lock().await;
        if !waiting.contains_key(key.as_str()) {
            self.list_waiter(key).await?;
            let listed = Arc::new(());
            let (backend, renewed, alive) = (self.clone(), key.clone(), Arc::downgrade(&listed));
            tokio::spawn(async move { backend.renew_waiting(renewed, alive).await });
            waiting.insert(
                key.as_str().to_owned(),
                Waiting {
                    count: 0,
                    generation: 0,
                    _listed: listed,
                },
            );
        }
        let w = waiting.entry(key.as_str().to_owned()).or_default();
        w.count += 1;
        w.generation += 1;
        Ok(())
    }

    /// Renews this backend's entry in `key`'s `waiting` while `alive` (the entry's handle
    /// in [`Shared::waiting`]) lives.
    async fn renew_waiting(&self, key: Key, alive: std::sync::Weak<()>) {
        loop {
            tokio::time::sleep(WAIT_RENEWAL).await;
            let _waiting = self.shared.waiting.lock().await;
            if alive.strong_count() == 0 {
                return;
            }
            if let Err(e) = self.list_waiter(&key).await {
                tracing::debug!(key = key.as_str(), "could not renew a waiter's entry: {e}");
            }
        }
    }

    /// The reverse of [`PostgresBackend::start_waiting`], when a waiter's subscription is
    /// dropped: after the last one, and [`LINGER`] without a new one, takes the process
    /// out. A failure leaves its entry until its lease ends: releases of that key notify
    /// for nothing meanwhile.
    async fn stop_waiting(&self, key: &Key) {
        let generation = {
            let mut waiting = self.shared.waiting.lock().await;
            let Some(w) = waiting.get_mut(key.as_str()) else {
                return;
            };
            w.count = w.count.saturating_sub(1);
            if w.count > 0 {
                return;
            }
            w.generation
        };
        tokio::time::sleep(LINGER).await;
        let mut waiting = self.shared.waiting.lock().await;
        match waiting.get(key.as_str()) {
            Some(w) if w.count == 0 && w.generation == generation => {}
            _ => return,
        }
        let args = Args {
            token: Some(&self.shared.waiter_id),
            ..Args::default()
        };
        if let Err(e) = self.call(Operation::Subscribe, "unwait", key, args).await {
            tracing::debug!(
                key = key.as_str(),
                "could not take a waiter's entry out: {e}"
            );
        }
        waiting.remove(key.as_str());
    }
}

/// Kept by a waiter's subscription: its drop takes the waiter out.
struct Subscribed {
    backend: PostgresBackend,
    key: Option<Key>,
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        let (Some(key), Ok(runtime)) = (self.key.take(), tokio::runtime::Handle::try_current())
        else {
            // No runtime (the process is ending): the entry stays until its lease ends,
            // which costs only notifications nobody hears.
            return;
        };
        let backend = self.backend.clone();
        runtime.spawn(async move { backend.stop_waiting(&key).await });
    }
}

/// What one statement carries.
enum Sql<'a> {
    /// One operation on one key.
    One(&'a Call<'a>),
    /// Prolongs of many keys, sorted by advisory lock id.
    Prolongs(&'a Prolongs),
}

/// One operation as the backend sends it.
struct Call<'a> {
    /// The function's name for it: `obtain`, `prolong`, …
    word: &'a str,
    key: &'a str,
    args: Args<'a>,
}

/// One statement on one connection, over the simple query protocol: a `&str` with no
/// arguments goes out as one `Query` message, like `raw_sql`, and the trait method's boxed
/// future keeps the backend's futures provably `Send` (`raw_sql`'s generic one does not).
fn fetch_rows<'c>(
    conn: &'c mut sqlx::PgConnection,
    sql: &'c str,
) -> BoxFuture<'c, std::result::Result<Vec<PgRow>, sqlx::Error>> {
    sqlx::Executor::fetch_all(conn, sql)
}

impl PostgresBackend {
    /// Closes every idle pooled connection. Called when a statement found its connection
    /// dead: what killed it (a restart, `pg_terminate_backend`, a network cut) most likely
    /// killed the idle ones too, and each would otherwise fail a call of its own. The failed
    /// call itself returns a retry-safe `Unavailable`; the next one opens a fresh connection.
    fn discard_idle(&self) {
        let mut closed = 0;
        while let Some(mut conn) = self.pool.try_acquire() {
            conn.close_on_drop();
            closed += 1;
            if closed > self.pool.options().get_max_connections() {
                break;
            }
        }
        tracing::debug!(closed, "a pooled connection was dead: closed the idle ones");
    }
}

/// One row of the function's answer.
struct Reply {
    op: Operation,
    outcome: String,
    ms: Option<i64>,
    holder: Option<String>,
    fencing: Option<i64>,
    holds: Option<i32>,
}

impl Reply {
    fn decode(op: Operation, row: &PgRow) -> Result<Self> {
        let get = || -> std::result::Result<Reply, sqlx::Error> {
            Ok(Reply {
                op,
                outcome: row.try_get::<Option<String>, _>(0)?.unwrap_or_default(),
                ms: row.try_get(1)?,
                holder: row.try_get(2)?,
                fencing: row.try_get(3)?,
                holds: row.try_get(4)?,
            })
        };
        get().map_err(|e| protocol(op, e))
    }

    fn unexpected(&self) -> Error {
        protocol(self.op, format!("outcome {:?}", self.outcome))
    }

    fn prolong_outcome(&self) -> Result<ProlongOutcome> {
        match self.outcome.as_str() {
            "prolonged" => Ok(ProlongOutcome::Prolonged),
            "prolonged_late" => Ok(ProlongOutcome::ProlongedLate),
            "lost" => Ok(ProlongOutcome::Lost),
            _ => Err(self.unexpected()),
        }
    }

    fn remaining(&self) -> Result<Duration> {
        let ms = self.ms.ok_or_else(|| self.unexpected())?;
        Ok(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
    }

    fn fencing(&self) -> Result<Fencing> {
        let f = self.fencing.ok_or_else(|| self.unexpected())?;
        u64::try_from(f).map(Fencing).map_err(|_| self.unexpected())
    }

    fn holds(&self) -> Result<u32> {
        let h = self.holds.ok_or_else(|| self.unexpected())?;
        u32::try_from(h).map_err(|_| self.unexpected())
    }

    fn holder(&self) -> Result<Option<lock_core::HolderInfo>> {
        self.holder
            .as_deref()
            .map(|json| {
                serde_json::from_str(json).map_err(|e| {
                    Error::new(
                        ErrorKind::Corrupt,
                        NAME,
                        self.op,
                        format!(
                            "the row's holder is not holder info ({e}); force-release the lock"
                        ),
                    )
                })
            })
            .transpose()
    }

    fn state(&self) -> Result<LockState> {
        match self.outcome.as_str() {
            "free" => Ok(LockState::Free),
            "cooling" => Ok(LockState::Cooling {
                remaining: self.remaining()?,
            }),
            "held" => Ok(LockState::Held {
                holder: self.holder()?.ok_or_else(|| self.unexpected())?,
                fencing: self.fencing()?,
                remaining: self.remaining()?,
                holds: self.holds()?,
            }),
            _ => Err(self.unexpected()),
        }
    }
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The pool's options hold the password: only names are shown.
        f.debug_struct("PostgresBackend")
            .field("table", &self.table())
            .field("grace", &self.grace)
            .field("notifications", &self.notifications)
            .field("durable", &self.durable)
            .field("timeout", &self.timeout)
            .field("auto_migrate", &self.auto_migrate)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl LockBackend for PostgresBackend {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .cross_process(true)
            .cross_host(true)
            .release_notification(self.notifications)
            .prolong_batch(Self::BATCH)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let op = Operation::Obtain;
        let holder = serde_json::to_string(req.holder).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                NAME,
                op,
                format!("holder info: {e}"),
            )
        })?;
        let token = req.token.digest();
        let args = Args {
            token: Some(&token),
            ttl_ms: req.ttl.as_millis(),
            grace_ms: self.grace_ms(req.ttl),
            holder: Some(&holder),
            delay_ms: 0,
        };
        let r = self.call(op, "obtain", req.key, args).await?;
        match r.outcome.as_str() {
            "acquired" => Ok(ObtainOutcome::Acquired {
                fencing: r.fencing()?,
                ttl: req.ttl,
            }),
            "reacquired" => Ok(ObtainOutcome::Reacquired { holds: r.holds()? }),
            "busy" => Ok(ObtainOutcome::Busy(Busy {
                holder: r.holder()?,
                remaining: r.remaining()?,
            })),
            _ => Err(r.unexpected()),
        }
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        let token = req.token.digest();
        let args = Args {
            token: Some(&token),
            ttl_ms: req.ttl.as_millis(),
            grace_ms: self.grace_ms(req.ttl),
            ..Args::default()
        };
        self.call(Operation::Prolongate, "prolong", req.key, args)
            .await?
            .prolong_outcome()
    }

    /// One statement per [`PostgresBackend::BATCH`] locks, one after the other, each in
    /// its own transaction within the backend's deadline; a failed statement answers its
    /// locks with its error and the next one still goes.
    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        let mut answers = Vec::with_capacity(reqs.len());
        for chunk in reqs.chunks(Self::BATCH) {
            match self.prolong_batch(chunk).await {
                Ok(each) => answers.extend(each.into_iter().map(Ok)),
                Err(e) => answers.extend(std::iter::repeat_n(Err(e), chunk.len())),
            }
        }
        answers
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        let token = req.token.digest();
        let args = Args {
            token: Some(&token),
            delay_ms: req.delay_after.map_or(0, Ttl::as_millis),
            ..Args::default()
        };
        let r = self
            .call(Operation::Release, "release", req.key, args)
            .await?;
        match r.outcome.as_str() {
            "released" => Ok(ReleaseOutcome::Released),
            "released_late" => Ok(ReleaseOutcome::ReleasedLate),
            "decremented" => Ok(ReleaseOutcome::Decremented { holds: r.holds()? }),
            "lost" => Ok(ReleaseOutcome::Lost),
            _ => Err(r.unexpected()),
        }
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        self.call(Operation::Inspect, "inspect", key, Args::default())
            .await?
            .state()
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        self.call(Operation::ForceRelease, "force", key, Args::default())
            .await?
            .state()
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        if !self.notifications {
            return Ok(None);
        }
        let subscription = self
            .shared
            .notifier
            .subscribe(&self.pool, &self.names.channel, key.as_str(), self.timeout)
            .await?;
        // Releases notify only a key that some process waits for: list this one.
        self.start_waiting(key).await?;
        let subscribed = Subscribed {
            backend: self.clone(),
            key: Some(key.clone()),
        };
        Ok(Some(subscription.holding(Box::new(subscribed))))
    }
}
