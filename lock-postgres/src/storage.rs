//! Shared holds (semaphores, read locks) and a waiting writer's marker: decided in the
//! client by lock-core's rules, in one transaction that holds the key's advisory lock (the
//! row it reads decoded by `read.rs`). The
//! backend is a storage of lock-core's adapter (`lock_core::backend::storage`) on this
//! path: the adapter runs `rules::step`, this module reads and writes the row.
//!
//! The function of `schema.sql` keeps the mutex, one statement per operation. A shared
//! request comes here straight away; any other comes here when the function answered
//! `defer` (the row holds shares or a live writer's marker; the function wrote nothing).
//! Here, on one connection, two messages:
//!
//! 1. `BEGIN`, the session pinned as for every call, the key's advisory lock, then the
//!    server's clock and the key's row, read after the lock was granted
//!    ([`Names::shared_read`](crate::sql::Names::shared_read));
//! 2. the decision of [`lock_core::backend::rules`] on that row at that instant, and if it
//!    writes: the row, the release notification when it frees room and some process waits,
//!    and `COMMIT` ([`Names::shared_write`](crate::sql::Names::shared_write)); else only
//!    `COMMIT`.
//!
//! So a shared operation costs two round trips (three after a `defer`) where the mutex costs
//! one; the rules are the ones every other backend decides with, not a second copy in
//! PL/pgSQL. A prolong or release of a shared hold this backend obtained skips the
//! function and its `defer` (the routine kit's hint). The row's shape is in `schema.sql`'s comment
//! on the table.
//!
//! # Cancel safety
//! A transaction cut off by the deadline or a cancelled caller leaves its connection open
//! mid-transaction: the connection is closed rather than returned to the pool, and the
//! server rolls the transaction back (nothing half-written; the advisory lock goes with it).

use lock_core::backend::codec::DigestJson;
use lock_core::backend::rules::columns::Columns;
use lock_core::backend::rules::{Clock, Wake};
use lock_core::backend::storage::{Commit, Decide, Snapshot, Storage};
use lock_core::backend::{Capabilities, Grace};
use lock_core::{Key, Operation, Result, Ttl};
use sqlx::postgres::PgRow;
use sqlx::Row as _;
use tracing::Instrument;

use crate::error::protocol;
use crate::exec::{fetch_rows, Db};

/// The client's path as a storage of lock-core's adapter: the adapter runs
/// [`lock_core::backend::rules::step`] on what [`Storage::transact`] read.
impl Storage for Db {
    /// The token's digest and the holder's JSON.
    type Codec = DigestJson;
    const NAME: &'static str = crate::NAME;

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none()
            .cross_process(true)
            .cross_host(true)
            .shared(true)
            .prolong_batch(1)
    }

    fn grace(&self, ttl: Ttl) -> Grace {
        Grace::or_ttl(self.grace, ttl)
    }

    /// The two messages of the module's docs by the backend's deadline, with the table in
    /// place ([`lock_sql::with_schema`]: if it vanished under a running backend, made again
    /// once and the transaction sent again). The key's advisory lock makes every call wait its turn: never
    /// [`Commit::Conflict`].
    async fn transact(
        &self,
        key: &Key,
        op: Operation,
        decide: &mut Decide<'_, String, String>,
    ) -> Result<Commit> {
        let span = tracing::debug_span!(
            "postgres_lock",
            op = op.as_str(),
            key = key.as_str(),
            shared = true
        );
        let deadline = self.pooled.deadline_from_now();
        let mut call = (key, decide);
        let wake = lock_sql::with_schema(self, op, deadline, &mut call, |db, (key, decide)| {
            Box::pin(db.transaction(op, key, &mut **decide))
        })
        .instrument(span)
        .await??;
        self.wake_local(key, wake);
        Ok(Commit::Done)
    }
}

impl Db {
    /// The two messages; a failure of the decision itself (a corrupt row, a refused
    /// request) still commits the transaction, which wrote nothing.
    async fn transaction(
        &self,
        op: Operation,
        key: &Key,
        decide: &mut Decide<'_, String, String>,
    ) -> std::result::Result<Result<Wake>, sqlx::Error> {
        let mut tx = self.pooled.open().await?;
        let read = self.names.shared_read(&self.session, key.as_str());
        let rows = fetch_rows(&mut tx.conn, &read).await?;
        let decided = match rows.last() {
            Some(row) => run_step(op, row, decide),
            None => Err(protocol(op, "the row's read answered nothing")),
        };
        let end = match &decided {
            Ok((Some(row), wake)) => self.names.shared_write(key.as_str(), row, *wake),
            _ => "COMMIT".to_owned(),
        };
        fetch_rows(&mut tx.conn, &end).await?;
        tx.open = false;
        Ok(decided.map(|(_, wake)| wake))
    }
}

/// The step on the row read, with the server's clock (in µs, also the fencing floor): the
/// row to write, whom to wake.
fn run_step(
    op: Operation,
    row: &PgRow,
    decide: &mut Decide<'_, String, String>,
) -> Result<(Option<Columns>, Wake)> {
    let now_us: i64 = row.try_get(0).map_err(|e| protocol(op, e))?;
    let now_us = u64::try_from(now_us).map_err(|_| protocol(op, "a clock before 1970"))?;
    let stored = crate::read::record(op, row)?;
    let change = decide(Snapshot {
        record: stored.as_ref(),
        clock: Clock::nanos(now_us.saturating_mul(1000)),
        fencing_floor: now_us,
    })?;
    Ok((change.write.map(|r| Columns::of(&r, now_us)), change.wake))
}
