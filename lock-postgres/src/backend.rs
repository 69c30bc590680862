//! `PostgresBackend`: the contract on Postgres, one statement per operation.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::routine::Routed;
use lock_core::backend::{
    Capabilities, Grace, KeyPage, KeysRequest, ObtainRequest, ProlongRequest, ReleaseRequest,
    ReleaseSubscription, Waiters,
};
use lock_core::{
    Key, LockBackend, LockState, ObtainOutcome, Operation, ProlongOutcome, ReleaseOutcome, Result,
};
use sqlx::PgPool;

use crate::exec::Db;
use crate::notify::{Channels, Listing, Notifier};
use crate::sql::{Args, Names, Session, Statements};
use crate::NAME;

/// Locks in a Postgres database: a transaction-scoped advisory lock serializes each
/// operation on a key, and a table holds the lock's state.
///
/// Each operation is one statement, one round trip, in its own transaction: holding a lock
/// pins no connection, and the backend works through PgBouncer in transaction mode. The
/// table and its function are created on first use, or up front with
/// [`PostgresBackend::migrate`]. Clones share the pool. Made by
/// [`PostgresBackend::builder`] (or [`PostgresBackend::lazy`] with every default).
#[derive(Clone)]
pub struct PostgresBackend {
    /// The function, and the client's path it defers to (`storage.rs`).
    routed: Routed<Db>,
    notifications: bool,
    notifier: Arc<Notifier>,
    listing: Arc<Listing>,
    application_name: Arc<str>,
}

/// Everything a backend is made of, as the builder hands it over.
pub(crate) struct Settings {
    pub(crate) pool: PgPool,
    pub(crate) names: Names,
    pub(crate) grace: Option<Grace>,
    pub(crate) notifications: bool,
    pub(crate) durable: bool,
    pub(crate) timeout: Duration,
    pub(crate) auto_migrate: bool,
    pub(crate) statements: Statements,
    /// The connections' `application_name` (empty for a pool the caller made).
    pub(crate) application_name: String,
    /// The backend's id in the rows' `waiting` (see `notify.rs`).
    pub(crate) waiter_id: String,
}

impl PostgresBackend {
    /// The backend's name in errors and reports.
    pub const NAME: &'static str = crate::NAME;
    /// The default schema of the lock table.
    pub const DEFAULT_SCHEMA: &'static str = "public";
    /// The default name of the lock table.
    pub const DEFAULT_TABLE: &'static str = "distlock";
    /// The default number of pooled connections when built from a URL.
    pub const DEFAULT_POOL_SIZE: u32 = 16;
    /// The default deadline of one call: see [`PostgresBuilder::timeout`](crate::PostgresBuilder::timeout).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The most locks one statement of the watchdog's renewals carries. Each statement is
    /// one transaction that holds the advisory lock of every key it prolongs until it
    /// commits, and the server has room for `max_locks_per_transaction` (64 by default)
    /// times `max_connections` locks in all; 200 stays well inside that with a few
    /// batches in flight, and one statement of 200 takes about 15 ms of server time.
    pub const BATCH: usize = 200;

    /// The backend `settings` describe.
    pub(crate) fn new(settings: Settings) -> Self {
        let db = Arc::new(Db {
            pooled: lock_sql::Pooled {
                pool: settings.pool,
                deadline: lock_sql::Deadline {
                    backend: NAME,
                    timeout: settings.timeout,
                    setting: "PostgresBuilder::timeout / timeout=",
                },
                address: |o| {
                    o.get_socket()
                        .is_none()
                        .then(|| (o.get_host().to_owned(), o.get_port()))
                },
            },
            names: settings.names,
            session: Session::new(settings.timeout, settings.durable),
            statements: settings.statements,
            grace: settings.grace,
            auto_migrate: settings.auto_migrate,
            schema: lock_sql::SchemaOnce::default(),
            local: (!settings.notifications).then(Waiters::default),
        });
        PostgresBackend {
            listing: Arc::new(Listing::new(Arc::clone(&db), settings.waiter_id)),
            routed: Routed::new(db),
            notifications: settings.notifications,
            notifier: Arc::new(Notifier::default()),
            application_name: settings.application_name.into(),
        }
    }

    fn db(&self) -> &Db {
        self.routed.routine()
    }

    /// The pool the backend runs on.
    pub fn pool(&self) -> &PgPool {
        &self.db().pooled.pool
    }

    /// The `application_name` of the backend's connections when built from a URL (as
    /// `pg_stat_activity` shows it), for the fault tests that terminate them. Not part of
    /// the public API.
    #[doc(hidden)]
    pub fn application_name(&self) -> &str {
        &self.application_name
    }

    /// `schema.table` of the lock table.
    pub fn table(&self) -> String {
        self.db().table()
    }

    /// Creates the schema, table and function if missing, and checks that an
    /// existing table has the expected shape. Idempotent; concurrent calls take turns.
    ///
    /// Bounded by the backend's deadline ([`PostgresBuilder::timeout`](crate::PostgresBuilder::timeout)),
    /// waiting for another migration included.
    ///
    /// # Errors
    /// [`ErrorKind::PermissionDenied`](lock_core::ErrorKind::PermissionDenied) when the user may not create them,
    /// [`ErrorKind::Config`](lock_core::ErrorKind::Config) when a table of that name exists with another shape,
    /// [`ErrorKind::Unavailable`](lock_core::ErrorKind::Unavailable) past the deadline (nothing half-made stays: the migration
    /// is one transaction).
    ///
    /// # Cancel safety
    /// Cancel safe: the migration runs on a connection that is closed when it ends, so a
    /// migration cut off mid-way is rolled back by the server.
    pub async fn migrate(&self) -> Result<()> {
        self.db().migrate().await
    }

    /// Deletes up to 100 rows past their grace period (or their day of memory), skipping
    /// every row another statement is working on; returns how many it deleted. Obtains do
    /// this now and then by themselves; call it to tidy up a table nobody obtains from.
    ///
    /// # Errors
    /// As for any operation.
    pub async fn sweep(&self) -> Result<u64> {
        let reply = self
            .db()
            .call(
                Operation::Inspect,
                "sweep",
                &Key::new("sweep")?,
                Args::default(),
            )
            .await?;
        // The count travels in the milliseconds' column.
        Ok(reply
            .remaining
            .map_or(0, |n| u64::try_from(n.as_millis()).unwrap_or(u64::MAX)))
    }
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The pool's options hold the password: only names are shown.
        f.debug_struct("PostgresBackend")
            .field("table", &self.table())
            .field("grace", &self.db().grace)
            .field("notifications", &self.notifications)
            .field("durable", &self.db().session.durable)
            .field("timeout", &self.db().pooled.deadline.timeout)
            .field("auto_migrate", &self.db().auto_migrate)
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
            .shared(true)
            .listing(lock_core::backend::Listing::InKeyOrder)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        self.routed.obtain(req).await
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        self.routed.prolongate(req).await
    }

    /// One statement per [`PostgresBackend::BATCH`] locks, one after the other, each in
    /// its own transaction within the backend's deadline; a failed statement answers its
    /// locks with its error and the next one still goes. The locks whose rows the function
    /// deferred (shared holds, a writer's marker) are then prolonged each on its own, in
    /// the client's decision, all at once. (The watchdog sends no more than one
    /// statement's worth at a time: `Capabilities::prolong_batch`.)
    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        self.routed.prolongate_many(reqs).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        self.routed.release(req).await
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        self.routed.inspect(key).await
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        self.routed.force_release(key).await
    }

    /// Without notifications (`notify=false`, as through PgBouncer), a subscription to this
    /// backend's own releases: waiters of another process find a release at their next
    /// poll.
    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        if let Some(local) = &self.db().local {
            return Ok(Some(local.subscribe(key.as_str())));
        }
        let subscription = self
            .notifier
            .subscribe(
                &self.db().pooled.pool,
                Channels {
                    one: &self.db().names.channel,
                    all: &self.db().names.channel_all,
                },
                key.as_str(),
                self.db().pooled.deadline.timeout,
            )
            .await?;
        // Releases notify only a key that some process waits for: list this one.
        let listed = self.listing.start(key).await?;
        Ok(Some(subscription.holding(Box::new(listed))))
    }

    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        self.db().list_keys(req).await
    }
}
