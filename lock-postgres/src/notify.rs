//! Release notifications over `LISTEN`/`NOTIFY`.
//!
//! A release that frees a lock runs `pg_notify(channel, key)` in its transaction, so the
//! notification goes out when the release commits; but only when some process waits for
//! that key (the row's `waiting` entries, which a backend makes for its first waiter of a key
//! before that waiter's next attempt, renews while it has waiters, and takes out after its
//! last: see `PostgresBackend::start_waiting`). `pg_notify` takes a lock that serializes the commits
//! of every notifying transaction of the cluster, WAL flush included, so a release nobody
//! waits for must not pay it. One listening connection per backend
//! (sqlx's `PgListener`, outside the pool's count) hears them all and wakes *one* waiter of
//! that key, in turn (`lock_core::Waiters`): only one can win the lock, and waking all of
//! them would queue their obtains on the key's advisory lock behind the winner's commit. It
//! is started by the first waiter, which returns from `subscribe` only once the
//! `LISTEN` is in place, so a release committed after that reaches it. After a dropped
//! connection the listener reconnects and listens again; every waiter is woken then, since a
//! notification may have been missed, and the waiters' fallback poll covers the gap.
//!
//! Through PgBouncer in transaction mode `LISTEN` cannot work (the session is not kept):
//! turn notifications off there (`PostgresBuilder::notifications(false)`, `notify=false`), and waiters poll.

use lock_core::{Operation, ReleaseSubscription, Result, Waiters};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::error::map_error;

pub(crate) struct Notifier {
    started: tokio::sync::Mutex<bool>,
    waiters: Waiters,
    /// Dropped with the backend: the listening task sees it and closes its connection.
    _alive: watch::Sender<()>,
    alive: watch::Receiver<()>,
}

impl Default for Notifier {
    fn default() -> Self {
        let (tx, rx) = watch::channel(());
        Notifier {
            started: tokio::sync::Mutex::default(),
            waiters: Waiters::default(),
            _alive: tx,
            alive: rx,
        }
    }
}

impl Notifier {
    /// Subscribes a waiter to `key`'s releases; the first one starts the listener, within
    /// `deadline` (a listener that cannot connect and `LISTEN` by then is given up, and the
    /// next subscription tries again).
    pub(crate) async fn subscribe(
        &self,
        pool: &PgPool,
        channel: &str,
        key: &str,
        deadline: std::time::Duration,
    ) -> Result<ReleaseSubscription> {
        {
            let mut started = self.started.lock().await;
            if !*started {
                let listening = async {
                    let mut listener = PgListener::connect_with(pool).await?;
                    listener.listen(channel).await?;
                    Ok::<_, sqlx::Error>(listener)
                };
                let listener = tokio::time::timeout(deadline, listening)
                    .await
                    .map_err(|_| {
                        lock_core::Error::new(
                            lock_core::ErrorKind::Unavailable,
                            crate::backend::NAME,
                            Operation::Subscribe,
                            format!(
                                "no answer within the deadline of {deadline:?} (PostgresBuilder::timeout / \
                                 timeout=); waiters poll instead"
                            ),
                        )
                    })?
                    .map_err(|e| map_error(Operation::Subscribe, e))?;
                let (waiters, alive) = (self.waiters.clone(), self.alive.clone());
                tokio::spawn(listen(listener, waiters, alive));
                *started = true;
            }
        }
        Ok(self.waiters.subscribe(key))
    }
}

/// Hands notifications out until the backend is gone.
async fn listen(mut listener: PgListener, waiters: Waiters, mut alive: watch::Receiver<()>) {
    loop {
        let next = tokio::select! {
            next = listener.try_recv() => next,
            // The sender went away with the backend.
            _ = alive.changed() => return,
        };
        match &next {
            Ok(Some(n)) => waiters.wake_one(n.payload()),
            // Reconnected (None) or failed: a notification may be lost; wake everyone.
            Ok(None) | Err(_) => waiters.wake_all(),
        }
        if next.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
}
