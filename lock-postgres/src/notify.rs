//! Release notifications over `LISTEN`/`NOTIFY`.
//!
//! Every release that frees a lock runs `pg_notify(channel, key)` in its transaction, so the
//! notification goes out when the release commits. One listening connection per backend
//! (sqlx's `PgListener`, outside the pool's count) hears them all and wakes *one* waiter of
//! that key, in turn: only one can win the lock, and waking all of them would queue their
//! obtains on the key's advisory lock behind the winner's commit. A woken waiter that loses
//! to another process waits for the next release like the rest. It is started by the first waiter, which returns from `subscribe` only once the
//! `LISTEN` is in place, so a release committed after that reaches it. After a dropped
//! connection the listener reconnects and listens again; every waiter is woken then, since a
//! notification may have been missed, and the waiters' fallback poll covers the gap.
//!
//! Through PgBouncer in transaction mode `LISTEN` cannot work (the session is not kept):
//! turn notifications off there (`with_notifications(false)`), and waiters poll.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use lock_core::{Operation, ReleaseSubscription, Result};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::error::map_error;

/// The waiters of each key, woken in turn.
type Waiters = HashMap<String, VecDeque<Waiter>>;

pub(crate) struct Notifier {
    started: tokio::sync::Mutex<bool>,
    waiters: Arc<Mutex<Waiters>>,
    next_id: std::sync::atomic::AtomicU64,
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
            next_id: std::sync::atomic::AtomicU64::new(0),
            _alive: tx,
            alive: rx,
        }
    }
}

struct Waiter {
    id: u64,
    tx: watch::Sender<u64>,
}

impl Waiter {
    fn wake(&self) {
        self.tx.send_modify(|v| *v += 1);
    }
}

struct Registration {
    key: String,
    id: u64,
    waiters: Weak<Mutex<Waiters>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(waiters) = self.waiters.upgrade() {
            let mut w = waiters.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(queue) = w.get_mut(&self.key) {
                queue.retain(|waiter| waiter.id != self.id);
                if queue.is_empty() {
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
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = watch::channel(0);
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_owned())
            .or_default()
            .push_back(Waiter { id, tx });
        let registration = Registration {
            key: key.to_owned(),
            id,
            waiters: Arc::downgrade(&self.waiters),
        };
        Ok(ReleaseSubscription::new(rx, Some(Box::new(registration))))
    }
}

/// Hands notifications out until the backend is gone.
async fn listen(
    mut listener: PgListener,
    waiters: Weak<Mutex<Waiters>>,
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
            let mut w = waiters.lock().unwrap_or_else(|p| p.into_inner());
            match &next {
                Ok(Some(n)) => {
                    // The longest-waiting one, which then goes to the back of the line.
                    if let Some(queue) = w.get_mut(n.payload()) {
                        if let Some(first) = queue.pop_front() {
                            first.wake();
                            queue.push_back(first);
                        }
                    }
                }
                // Reconnected (None) or failed: a notification may be lost; wake everyone.
                Ok(None) | Err(_) => {
                    for waiter in w.values().flatten() {
                        waiter.wake();
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
