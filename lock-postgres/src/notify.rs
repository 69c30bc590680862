//! Release notifications over `LISTEN`/`NOTIFY`.
//!
//! Every release that frees a lock runs `pg_notify(channel, key)` in its transaction, so the
//! notification goes out when the release commits. One listening connection per backend
//! (sqlx's `PgListener`, outside the pool's count) hears them all and wakes the waiters of
//! that key. It is started by the first waiter, which returns from `subscribe` only once the
//! `LISTEN` is in place, so a release committed after that reaches it. After a dropped
//! connection the listener reconnects and listens again; every waiter is woken then, since a
//! notification may have been missed, and the waiters' fallback poll covers the gap.
//!
//! Through PgBouncer in transaction mode `LISTEN` cannot work (the session is not kept):
//! turn notifications off there (`with_notifications(false)`), and waiters poll.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use lock_core::{Operation, ReleaseSubscription, Result};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::error::map_error;

pub(crate) struct Notifier {
    started: tokio::sync::Mutex<bool>,
    waiters: Arc<Mutex<HashMap<String, Wanted>>>,
    /// Dropped with the backend: the listening task sees it and closes its connection.
    _alive: watch::Sender<()>,
    alive: watch::Receiver<()>,
}

impl Default for Notifier {
    fn default() -> Self {
        let (tx, rx) = watch::channel(());
        Notifier {
            started: tokio::sync::Mutex::default(),
            waiters: Arc::default(),
            _alive: tx,
            alive: rx,
        }
    }
}

struct Wanted {
    tx: watch::Sender<u64>,
    count: usize,
}

struct Registration {
    key: String,
    waiters: Weak<Mutex<HashMap<String, Wanted>>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(waiters) = self.waiters.upgrade() {
            let mut w = waiters.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(entry) = w.get_mut(&self.key) {
                entry.count -= 1;
                if entry.count == 0 {
                    w.remove(&self.key);
                }
            }
        }
    }
}

impl Notifier {
    pub(crate) async fn subscribe(
        &self,
        pool: &PgPool,
        channel: &str,
        key: &str,
    ) -> Result<ReleaseSubscription> {
        {
            let mut started = self.started.lock().await;
            if !*started {
                let mut listener = PgListener::connect_with(pool)
                    .await
                    .map_err(|e| map_error(Operation::Subscribe, e))?;
                listener
                    .listen(channel)
                    .await
                    .map_err(|e| map_error(Operation::Subscribe, e))?;
                let (waiters, alive) = (Arc::downgrade(&self.waiters), self.alive.clone());
                tokio::spawn(listen(listener, waiters, alive));
                *started = true;
            }
        }
        let rx = {
            let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            let entry = w.entry(key.to_owned()).or_insert_with(|| Wanted {
                tx: watch::channel(0).0,
                count: 0,
            });
            entry.count += 1;
            entry.tx.subscribe()
        };
        let registration = Registration {
            key: key.to_owned(),
            waiters: Arc::downgrade(&self.waiters),
        };
        Ok(ReleaseSubscription::new(rx, Some(Box::new(registration))))
    }
}

/// Hands notifications out until the backend is gone.
async fn listen(
    mut listener: PgListener,
    waiters: Weak<Mutex<HashMap<String, Wanted>>>,
    mut alive: watch::Receiver<()>,
) {
    loop {
        let next = tokio::select! {
            next = listener.try_recv() => next,
            // The sender went away with the backend.
            _ = alive.changed() => return,
        };
        let Some(waiters) = waiters.upgrade() else {
            return;
        };
        {
            let w = waiters.lock().unwrap_or_else(|p| p.into_inner());
            match &next {
                Ok(Some(n)) => {
                    if let Some(entry) = w.get(n.payload()) {
                        entry.tx.send_modify(|v| *v += 1);
                    }
                }
                // Reconnected (None) or failed: a notification may be lost; wake everyone.
                Ok(None) | Err(_) => {
                    for entry in w.values() {
                        entry.tx.send_modify(|v| *v += 1);
                    }
                }
            }
        }
        drop(waiters);
        if next.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
}
