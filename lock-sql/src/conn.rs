//! Pooled connections: taken by a deadline, closed when a transaction on them is cut off,
//! and the idle ones dropped once one is found dead.

use lock_core::backend::connect_or_say_why;
use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};
use tokio::time::Instant;

/// A pooled connection of `pool` by `deadline`. While the pool holds none and none comes,
/// one TCP connection attempt of its own to `cold()` (the server's host and port; `None`
/// for a Unix socket, which a TCP probe would say nothing of) says why: the pool would
/// retry a refused connection until the deadline and say only that time ran out. A warm
/// pool calls nothing.
///
/// # Errors
/// The pool's, [`sqlx::Error::PoolTimedOut`] at the deadline, and the probe's finding as
/// [`sqlx::Error::Io`].
///
/// # Cancel safety
/// Cancel safe: a connection not yet handed over stays in the pool.
pub async fn connection<DB: Database>(
    pool: &Pool<DB>,
    deadline: Instant,
    cold: impl FnOnce(&<DB::Connection as sqlx::Connection>::Options) -> Option<(String, u16)>,
) -> Result<PoolConnection<DB>, sqlx::Error> {
    let address = match pool.size() {
        0 => cold(&pool.connect_options()),
        _ => None,
    };
    let probe = address.as_ref().map(|(host, port)| (host.as_str(), *port));
    match connect_or_say_why(pool.acquire(), deadline, probe).await {
        Ok(Some(conn)) => conn,
        Ok(None) => Err(sqlx::Error::PoolTimedOut),
        Err(e) => Err(sqlx::Error::Io(e)),
    }
}

/// Closes every idle pooled connection of `pool`: for a call that found its connection
/// dead, since what killed it (a restart, a killed session, a network cut) most likely
/// killed the idle ones too, and each would otherwise fail a call of its own.
pub fn discard_idle<DB: Database>(pool: &Pool<DB>) {
    let mut closed = 0;
    while let Some(mut conn) = pool.try_acquire() {
        conn.close_on_drop();
        closed += 1;
        if closed > pool.options().get_max_connections() {
            break;
        }
    }
    tracing::debug!(closed, "a pooled connection was dead: closed the idle ones");
}

/// A pooled connection inside a transaction: closed, not pooled, if dropped while `open`
/// (its caller cancelled, its deadline passed), so that the server rolls the transaction
/// back and nobody reuses a connection in the middle of one. Set `open` to false once the
/// transaction ended.
pub struct Open<DB: Database> {
    /// The connection.
    pub conn: PoolConnection<DB>,
    /// The transaction is still open.
    pub open: bool,
}

impl<DB: Database> Open<DB> {
    /// `conn`, with a transaction about to begin on it.
    pub fn new(conn: PoolConnection<DB>) -> Self {
        Open { conn, open: true }
    }
}

impl<DB: Database> Drop for Open<DB> {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
    }
}
