//! Dedicated connections for the WATCH/MULTI variant.
//!
//! `WATCH` state belongs to a server connection: two transactions interleaved on one
//! multiplexed connection would watch each other's keys and could both commit. So each
//! transaction checks a connection out of this pool for its whole length, and nobody else
//! sends a command on it meanwhile. A connection comes back only when its transaction ended
//! cleanly: one that saw an error, or whose transaction was cancelled mid-flight, is dropped
//! and replaced by a fresh one on demand.

use std::sync::{Arc, Mutex};

use lock_core::{Operation, Result};
use redis::aio::MultiplexedConnection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::primary::{connection_config, Primary};
use crate::error::map_error;

/// A pool of at most `size` connections to the primary, opened lazily.
pub(crate) struct Pool {
    primary: Arc<Primary>,
    idle: Mutex<Vec<Dedicated>>,
    permits: std::sync::Arc<Semaphore>,
    backend: &'static str,
}

/// One connection and the id the server knows it by (for `CLIENT KILL ID`).
pub(crate) struct Dedicated {
    pub(crate) conn: MultiplexedConnection,
    pub(crate) id: i64,
    /// The node's `host:port`.
    pub(crate) node: String,
}

/// A connection checked out for one transaction.
pub(crate) struct Lease<'a> {
    pool: &'a Pool,
    conn: Option<Dedicated>,
    _permit: OwnedSemaphorePermit,
    clean: bool,
}

impl Pool {
    pub(crate) fn new(primary: Arc<Primary>, size: usize, backend: &'static str) -> Self {
        let size = size.max(1);
        Pool {
            primary,
            idle: Mutex::default(),
            permits: std::sync::Arc::new(Semaphore::new(size)),
            backend,
        }
    }

    pub(crate) fn primary(&self) -> &Primary {
        &self.primary
    }

    /// Waits for a free slot, then hands out an idle connection or opens one.
    pub(crate) async fn get(&self, op: Operation) -> Result<Lease<'_>> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the pool's semaphore is never closed");
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match idle {
            Some(c) => c,
            None => self.open(op).await?,
        };
        Ok(Lease {
            pool: self,
            conn: Some(conn),
            _permit: permit,
            clean: false,
        })
    }

    async fn open(&self, op: Operation) -> Result<Dedicated> {
        // The backend's deadline bounds each call, and a transaction it cuts off drops its
        // connection.
        let client = self.primary.client(self.backend, op).await?;
        let opened = async {
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&connection_config())
                .await?;
            let id = redis::cmd("CLIENT")
                .arg("ID")
                .query_async(&mut conn)
                .await?;
            let node = client.get_connection_info().addr().to_string();
            Ok(Dedicated { conn, id, node })
        };
        opened.await.map_err(|e: redis::RedisError| {
            self.primary.failed(&e);
            map_error(self.backend, op, e)
        })
    }

    /// Drops every idle connection; the next transactions open fresh ones (behind Sentinel,
    /// to the primary the sentinels name then).
    pub(crate) fn discard_idle(&self) {
        self.primary.forget();
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// `(node, id)` of the idle connections.
    pub(crate) fn idle_ids(&self) -> Vec<(String, i64)> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.iter().map(|d| (d.node.clone(), d.id)).collect()
    }
}

impl Lease<'_> {
    pub(crate) fn conn(&mut self) -> &mut MultiplexedConnection {
        &mut self
            .conn
            .as_mut()
            .expect("a lease holds its connection until dropped")
            .conn
    }

    /// Marks the transaction as ended cleanly: the connection goes back to the pool.
    pub(crate) fn done(mut self) {
        self.clean = true;
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let (true, Some(conn)) = (self.clean, self.conn.take()) {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(conn);
        }
    }
}
