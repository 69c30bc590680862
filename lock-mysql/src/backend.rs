//! `MySqlBackend`: the contract on MariaDB or MySQL, one transaction per operation.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::routine::Routed;
use lock_core::backend::storage::Storage;
use lock_core::backend::{
    Capabilities, KeyPage, KeysRequest, Listing, ObtainRequest, ProlongRequest, ReleaseRequest,
    ReleaseSubscription,
};
use lock_core::{
    Key, LockBackend, LockState, ObtainOutcome, ProlongOutcome, ReleaseOutcome, Result,
};
use sqlx::MySqlPool;

use crate::exec::Db;

/// Locks in a MariaDB or MySQL database: one InnoDB row per key, each operation one
/// transaction that locks the row, reads the server's clock, and writes what
/// [`lock_core::backend::rules`] decide: in the table's stored procedure, which holds the
/// same decision table, for exclusive holds; in the client otherwise (the backend is a
/// storage of lock-core's adapter, [`lock_core::backend::storage`], plus batched prolongs
/// and a sweep of old rows).
///
/// An obtain, prolong or release of an exclusive hold is one round trip (a `CALL`);
/// shared holds, mode changes, `inspect` and `force_release` are two, and so is every
/// operation when the procedure cannot be made or called (no CREATE ROUTINE or EXECUTE
/// privilege: the backend says so once at WARN and goes on). Holding a lock pins no
/// connection (not `GET_LOCK`, which belongs to a connection: see the crate docs). The
/// server has no release notifications: a release wakes a waiter of the same backend (or
/// a clone of it) at once, and waiters elsewhere poll with their retry strategy. The table is
/// created on first use, or up front with [`MySqlBackend::migrate`]. Clones share the
/// pool. Made by [`MySqlBackend::builder`] (or [`MySqlBackend::lazy`] with every default).
#[derive(Clone)]
pub struct MySqlBackend {
    /// The procedure, and the client's path it defers to (`storage.rs`).
    routed: Routed<Db>,
}

impl MySqlBackend {
    /// The backend's name in errors and reports.
    pub const NAME: &'static str = crate::NAME;
    /// The default name of the lock table.
    pub const DEFAULT_TABLE: &'static str = "distlock";
    /// The default number of pooled connections when built from a URL.
    pub const DEFAULT_POOL_SIZE: u32 = 16;
    /// The default deadline of one call: see [`MySqlBuilder::timeout`](crate::MySqlBuilder::timeout).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The most locks one transaction of the watchdog's renewals carries: their row locks
    /// are held together until it commits.
    pub const BATCH: usize = 200;
    /// One acquiring obtain in this many starts a sweep of old rows in the background.
    pub const SWEEP_EVERY: u32 = 100;

    pub(crate) fn new(db: Db) -> Self {
        MySqlBackend {
            routed: Routed::new(Arc::new(db)),
        }
    }

    fn db(&self) -> &Db {
        self.routed.routine()
    }

    /// The pool the backend runs on.
    pub fn pool(&self) -> &MySqlPool {
        &self.db().pooled.pool
    }

    /// The lock table's name (in the URL's database).
    pub fn table(&self) -> &str {
        &self.db().names.table
    }

    /// Creates the table if missing, and checks that an existing one has the expected
    /// shape and is InnoDB. Idempotent; concurrent calls take turns.
    ///
    /// Bounded by the backend's deadline ([`MySqlBuilder::timeout`](crate::MySqlBuilder::timeout)).
    ///
    /// # Errors
    /// [`ErrorKind::PermissionDenied`](lock_core::ErrorKind::PermissionDenied) when the user may not create it,
    /// [`ErrorKind::Config`](lock_core::ErrorKind::Config) when a table of that name exists with another shape or
    /// engine, or the URL names no database, [`ErrorKind::Unavailable`](lock_core::ErrorKind::Unavailable) past the deadline.
    ///
    /// # Cancel safety
    /// Cancel safe: the migration is one `CREATE TABLE IF NOT EXISTS`, which the server
    /// runs whole or not at all.
    pub async fn migrate(&self) -> Result<()> {
        self.db().migrate().await
    }

    /// Deletes up to 100 rows past their grace period (or their day of memory) that no
    /// writer waits on, skipping every row another operation is working on; returns how
    /// many it deleted. Obtains start one now and then by themselves
    /// ([`MySqlBackend::SWEEP_EVERY`]); call it to tidy up a table nobody obtains from.
    ///
    /// # Errors
    /// As for any operation.
    ///
    /// # Cancel safety
    /// Cancel safe: a sweep cut off is rolled back.
    pub async fn sweep(&self) -> Result<u64> {
        self.db().sweep().await
    }

    /// Whether exclusive holds still go through the table's procedure (false once it was
    /// found missing or not ours to call, or with `decide_in_client`). For the tests; not
    /// part of the public API.
    #[doc(hidden)]
    pub fn uses_procedure(&self) -> bool {
        self.db()
            .procedure
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A sweep in the background, one at a time, now and then after an acquisition.
    fn maybe_sweep(&self) {
        if fastrand::u32(..Self::SWEEP_EVERY) != 0
            || self.db().sweeping.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let db = Arc::clone(self.routed.routine());
        tokio::spawn(async move {
            let _done = Sweeping(Arc::clone(&db));
            if let Err(e) = db.sweep().await {
                tracing::debug!(error = %e, "sweeping old lock rows failed; the next one will try again");
            }
        });
    }
}

/// Clears the sweep flag however the sweep ends (a runtime shutting down included).
struct Sweeping(Arc<Db>);

impl Drop for Sweeping {
    fn drop(&mut self) {
        self.0.sweeping.store(false, Ordering::Release);
    }
}

impl fmt::Debug for MySqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.db(), f)
    }
}

#[async_trait]
impl LockBackend for MySqlBackend {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.db()
            .storage_capabilities()
            .prolong_batch(Self::BATCH)
            .listing(Listing::InKeyOrder)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let outcome = self.routed.obtain(req).await?;
        if matches!(outcome, ObtainOutcome::Acquired { .. }) {
            self.maybe_sweep();
        }
        Ok(outcome)
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        self.routed.prolongate(req).await
    }

    /// Up to [`MySqlBackend::BATCH`] locks per transaction: their rows read in primary-key
    /// order, each decided by the rules, the changed ones written in one statement.
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

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.db().subscribe_releases(key).await
    }

    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        self.db().list_keys(req).await
    }
}
