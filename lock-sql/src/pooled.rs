//! A backend's pool with the deadline of its calls.

use std::future::Future;

use lock_core::{Operation, Result};
use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};
use tokio::time::Instant;

use crate::Deadline;

/// The options of a driver's connections.
pub type Options<DB> = <<DB as Database>::Connection as sqlx::Connection>::Options;

/// A backend's pool and the deadline of its calls: what each call takes its connection
/// from, and by when.
pub struct Pooled<DB: Database> {
    /// The pool.
    pub pool: Pool<DB>,
    /// The deadline of one call, and what its error names.
    pub deadline: Deadline,
    /// The server's host and port from the pool's options, for the probe that says why a
    /// cold pool cannot connect; `None` for a Unix socket.
    pub address: fn(&Options<DB>) -> Option<(String, u16)>,
}

impl<DB: Database> Pooled<DB> {
    /// The instant a call that starts now must end by.
    pub fn deadline_from_now(&self) -> Instant {
        Instant::now() + self.deadline.timeout
    }

    /// A pooled connection by `deadline` ([`connection`](crate::connection): a refused
    /// server is said as such, not as the deadline).
    ///
    /// # Errors
    /// As [`connection`](crate::connection)'s.
    ///
    /// # Cancel safety
    /// Cancel safe: a connection not yet handed over stays in the pool.
    pub async fn connection(
        &self,
        deadline: Instant,
    ) -> std::result::Result<PoolConnection<DB>, sqlx::Error> {
        crate::connection(&self.pool, deadline, self.address).await
    }

    /// A pooled connection for a transaction, taken within a whole deadline from now:
    /// [`Open`](crate::Open), closed rather than pooled if dropped before the transaction
    /// ended.
    ///
    /// # Errors
    /// As [`Pooled::connection`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Pooled::connection`].
    pub async fn open(&self) -> std::result::Result<crate::Open<DB>, sqlx::Error> {
        Ok(crate::Open::new(
            self.connection(self.deadline_from_now()).await?,
        ))
    }

    /// Runs `fut` by `deadline` ([`within`](crate::within)).
    ///
    /// # Errors
    /// A retry-safe `Unavailable` naming the deadline and its setting.
    ///
    /// # Cancel safety
    /// As `fut`'s.
    pub async fn within<T>(
        &self,
        op: Operation,
        deadline: Instant,
        fut: impl Future<Output = T>,
    ) -> Result<T> {
        crate::within(&self.deadline, op, deadline, fut).await
    }

    /// Closes every idle pooled connection ([`discard_idle`](crate::discard_idle)): a call
    /// found its connection dead, and what killed it most likely killed the idle ones too.
    pub fn discard_idle(&self) {
        crate::discard_idle(&self.pool);
    }
}
