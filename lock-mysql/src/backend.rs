//! `MySqlBackend`: the contract on MariaDB or MySQL, one transaction per operation.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::rules::Wake;
use lock_core::backend::storage::{self, Storage};
use lock_core::backend::{
    Capabilities, Grace, KeyPage, KeysRequest, Listing, ObtainRequest, ProlongRequest,
    ReleaseRequest, ReleaseSubscription,
};
use lock_core::{
    Key, LockBackend, LockState, ObtainOutcome, Operation, ProlongOutcome, ReleaseOutcome, Result,
    Ttl,
};
use lock_sql::reply::Word;
use lock_sql::SharedTokens;
use sqlx::MySqlPool;

use crate::exec::Db;
use crate::sql::{Call, ProcedureOp};

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
    db: Arc<Db>,
    /// Tokens that hold shared: their prolongs and releases skip the procedure.
    shared: Arc<SharedTokens>,
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
            db: Arc::new(db),
            shared: Arc::default(),
        }
    }

    /// The pool the backend runs on.
    pub fn pool(&self) -> &MySqlPool {
        &self.db.pooled.pool
    }

    /// The lock table's name (in the URL's database).
    pub fn table(&self) -> &str {
        &self.db.names.table
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
        self.db.migrate().await
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
        self.db.sweep().await
    }

    /// Whether exclusive holds still go through the table's procedure (false once it was
    /// found missing or not ours to call, or with `decide_in_client`). For the tests; not
    /// part of the public API.
    #[doc(hidden)]
    pub fn uses_procedure(&self) -> bool {
        self.db.procedure.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A sweep in the background, one at a time, now and then after an acquisition.
    fn maybe_sweep(&self) {
        if fastrand::u32(..Self::SWEEP_EVERY) != 0 || self.db.sweeping.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let db = Arc::clone(&self.db);
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
        fmt::Debug::fmt(&*self.db, f)
    }
}

#[async_trait]
impl LockBackend for MySqlBackend {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.db
            .storage_capabilities()
            .prolong_batch(Self::BATCH)
            .listing(Listing::InKeyOrder)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        req.mode.check(Self::NAME)?;
        let outcome = if req.mode.is_shared() || req.change.is_some() {
            // Shared requests and mode changes (rare: an upgrade) are decided in the client,
            // by the rules: the procedure knows exclusive holds only.
            self.shared.obtain(&*self.db, req).await?
        } else {
            let op = Operation::Obtain;
            let holder = lock_sql::holder_json(Self::NAME, req.holder, op)?;
            let token = req.token.digest();
            let call = Call {
                op: ProcedureOp::Obtain,
                key: req.key.as_str(),
                token: &token,
                holder: Some(&holder),
                ttl_us: micros(req.ttl),
                grace_us: micros_of(Grace::or_ttl(self.db.grace, req.ttl).as_duration()),
                delay_us: 0,
            };
            // One deadline for the call and, after a `defer`, the client's path.
            let deadline = self.db.pooled.deadline_from_now();
            match self.db.call(op, &call, deadline).await? {
                Some(r) if r.outcome != Word::Defer => r.obtain_outcome(req.ttl)?,
                _ => {
                    let rest = storage::obtain(&*self.db, req);
                    self.db.pooled.within(op, deadline, rest).await??
                }
            }
        };
        if matches!(outcome, ObtainOutcome::Acquired { .. }) {
            self.maybe_sweep();
        }
        Ok(outcome)
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        if let Some(outcome) = self.shared.prolongate(&*self.db, req).await {
            return outcome;
        }
        let token = req.token.digest();
        let call = Call {
            op: ProcedureOp::Prolong,
            key: req.key.as_str(),
            token: &token,
            holder: None,
            ttl_us: micros(req.ttl),
            grace_us: micros_of(Grace::or_ttl(self.db.grace, req.ttl).as_duration()),
            delay_us: 0,
        };
        let (op, deadline) = (Operation::Prolongate, self.db.pooled.deadline_from_now());
        match self.db.call(op, &call, deadline).await? {
            Some(r) if r.outcome != Word::Defer => r.prolong_outcome(),
            _ => {
                let rest = storage::prolongate(&*self.db, req);
                self.db.pooled.within(op, deadline, rest).await?
            }
        }
    }

    /// Up to [`MySqlBackend::BATCH`] locks per transaction: their rows read in primary-key
    /// order, each decided by the rules, the changed ones written in one statement.
    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        let mut answers = Vec::with_capacity(reqs.len());
        for chunk in reqs.chunks(Self::BATCH) {
            match self.db.prolong_batch(chunk).await {
                Ok(each) => answers.extend(each.into_iter().map(Ok)),
                Err(e) => answers.extend(std::iter::repeat_n(Err(e), chunk.len())),
            }
        }
        answers
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        if let Some(outcome) = self.shared.release(&*self.db, req).await {
            return outcome;
        }
        let token = req.token.digest();
        let call = Call {
            op: ProcedureOp::Release,
            key: req.key.as_str(),
            token: &token,
            holder: None,
            ttl_us: 0,
            grace_us: 0,
            delay_us: req.delay_after.map_or(0, micros),
        };
        let (op, deadline) = (Operation::Release, self.db.pooled.deadline_from_now());
        match self.db.call(op, &call, deadline).await? {
            Some(r) if r.outcome != Word::Defer => {
                let outcome = r.release_outcome()?;
                if matches!(
                    outcome,
                    ReleaseOutcome::Released | ReleaseOutcome::ReleasedLate
                ) {
                    // Committed, and an exclusive hold ended (the procedure decides no
                    // other): one waiter of this process can get in.
                    self.db.waiters.wake(req.key.as_str(), Wake::One);
                }
                Ok(outcome)
            }
            _ => {
                let rest = storage::release(&*self.db, req);
                self.db.pooled.within(op, deadline, rest).await?
            }
        }
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        storage::inspect(&*self.db, key).await
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        storage::force_release(&*self.db, key).await
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.db.subscribe_releases(key).await
    }

    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        self.db.list_keys(req).await
    }
}

/// A ttl in µs, as the procedure takes it.
fn micros(ttl: Ttl) -> u64 {
    micros_of(ttl.as_duration())
}

fn micros_of(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
