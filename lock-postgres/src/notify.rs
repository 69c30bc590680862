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
//! that key, in turn (`lock_core::backend::Waiters`): only one can win the lock, and waking all of
//! them would queue their obtains on the key's advisory lock behind the winner's commit. It
//! is started by the first waiter, which returns from `subscribe` only once the
//! `LISTEN` is in place,
//! Where the rules wake every waiter (a downgrade lets all readers in; the last share
//! leaving beside a waiting writer), the notification goes to a second channel, and its
//! listener wakes every waiter of the key in the process: waking one there could wake a
//! writer that still cannot get in, while the readers sleep to their fallback poll.
//! The listener so a release committed after that reaches it. After a dropped
//! connection the listener reconnects and listens again; every waiter is woken then, since a
//! notification may have been missed, and the waiters' fallback poll covers the gap.
//!
//! Through PgBouncer in transaction mode `LISTEN` cannot work (the session is not kept):
//! turn notifications off there (`PostgresBuilder::notifications(false)`, `notify=false`):
//! a release then wakes the waiters of the same backend in its own process (`Db::wake_local`),
//! and waiters elsewhere poll.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_core::backend::{ReleaseSubscription, Waiters};
use lock_core::{Key, Operation, Result};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::error::map_error;
use crate::exec::Db;
use crate::sql::Args;

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
        channels: Channels<'_>,
        key: &str,
        deadline: std::time::Duration,
    ) -> Result<ReleaseSubscription> {
        {
            let mut started = self.started.lock().await;
            if !*started {
                let listening = async {
                    let mut listener = PgListener::connect_with(pool).await?;
                    listener.listen_all([channels.one, channels.all]).await?;
                    Ok::<_, sqlx::Error>(listener)
                };
                let listener = tokio::time::timeout(deadline, listening)
                    .await
                    .map_err(|_| {
                        lock_core::Error::new(
                            lock_core::ErrorKind::Unavailable,
                            crate::NAME,
                            Operation::Subscribe,
                            format!(
                                "no answer within the deadline of {deadline:?} (PostgresBuilder::timeout / \
                                 timeout=); waiters poll instead"
                            ),
                        )
                    })?
                    .map_err(|e| map_error(Operation::Subscribe, e))?;
                let (waiters, alive) = (self.waiters.clone(), self.alive.clone());
                let all = channels.all.to_owned();
                tokio::spawn(listen(listener, waiters, alive, all));
                *started = true;
            }
        }
        Ok(self.waiters.subscribe(key))
    }
}

/// The two channels of a table's notifications: [`Names::channel`](crate::sql::Names) and
/// its `channel_all`.
#[derive(Clone, Copy)]
pub(crate) struct Channels<'a> {
    /// Each notification wakes one waiter of its key.
    pub(crate) one: &'a str,
    /// Each notification wakes every waiter of its key.
    pub(crate) all: &'a str,
}

/// Hands notifications out until the backend is gone; one on `all` wakes every waiter of
/// its key.
async fn listen(
    mut listener: PgListener,
    waiters: Waiters,
    mut alive: watch::Receiver<()>,
    all: String,
) {
    loop {
        let next = tokio::select! {
            next = listener.try_recv() => next,
            // The sender went away with the backend.
            _ = alive.changed() => return,
        };
        match &next {
            Ok(Some(n)) if n.channel() == all => waiters.wake_key(n.payload()),
            Ok(Some(n)) => waiters.wake_one(n.payload()),
            // Reconnected (None) or failed: a notification may be lost; wake everyone.
            Ok(None) | Err(_) => waiters.wake_all(),
        }
        if next.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
}

/// How long a backend stays listed as a waiter of a key after its last waiter left: a
/// process that waited for a key is likely to again (a worker that takes turns on a job),
/// and listing it in and out on every turn would put two statements on the key's lock per
/// hand-off. Meanwhile releases of the key notify for nothing, as they all did before
/// waiters were listed.
const LINGER: Duration = Duration::from_secs(1);

/// The lease of a backend's entry in a row's `waiting`: a process that dies (or drops the
/// backend without a runtime to take its entry out) leaves an entry that ends with it, and
/// the key's releases stop notifying for nothing.
const WAIT_LEASE: Duration = Duration::from_secs(30);

/// How often a backend with waiters of a key renews its entry. A row made again while they
/// wait (swept, or the table emptied by a TRUNCATE or a restore) lists the backend again
/// within this; meanwhile its waiters fall back to polling.
const WAIT_RENEWAL: Duration = Duration::from_secs(10);

/// How soon a renewal that failed is tried again.
const RENEWAL_RETRY: Duration = Duration::from_secs(1);

/// A backend's entries in the rows' `waiting`: which keys this process waits for, listed
/// from the first waiter of a key to the last (and [`LINGER`] after).
pub(crate) struct Listing {
    db: Arc<Db>,
    /// This backend's id in the rows (random; not a secret: it grants nothing).
    id: String,
    /// This process's waiters of each key listed. An async mutex: an entry changes only
    /// together with the table's, in the order asked.
    waiting: tokio::sync::Mutex<HashMap<String, Waiting>>,
}

/// This process's waiters of one key.
struct Waiting {
    /// Subscriptions alive now.
    count: usize,
    /// Bumped by each new subscription: a removal scheduled before it is void.
    generation: u64,
    /// Held while the entry lives: the renewal task of this entry (and no other) runs
    /// while it can upgrade its weak handle.
    _listed: Arc<()>,
}

impl Listing {
    pub(crate) fn new(db: Arc<Db>, id: String) -> Self {
        Listing {
            db,
            id,
            waiting: tokio::sync::Mutex::default(),
        }
    }

    /// Enters (or renews) this backend in `key`'s `waiting`, and returns once that is
    /// committed.
    async fn list(&self, key: &Key) -> Result<()> {
        let args = Args {
            token: Some(&self.id),
            ttl_ms: WAIT_LEASE.as_secs() * 1000,
            ..Args::default()
        };
        self.db
            .call(Operation::Subscribe, "wait", key, args)
            .await?;
        Ok(())
    }

    /// Lists this process as a waiter of `key` unless it is listed already (then starts
    /// renewing its lease); returns once the entry is committed, so that a release after
    /// that point notifies. The returned value takes the waiter out when dropped.
    ///
    /// # Cancel safety
    /// Cut off while the entry goes out, the table may list the process with no waiter
    /// here: releases of that key then notify for nothing until the lease ends, never the
    /// other way round.
    pub(crate) async fn start(self: &Arc<Self>, key: &Key) -> Result<Subscribed> {
        let mut waiting = self.waiting.lock().await;
        let w = match waiting.entry(key.as_str().to_owned()) {
            std::collections::hash_map::Entry::Occupied(w) => w.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                self.list(key).await?;
                let listed = Arc::new(());
                let (listing, renewed, alive) =
                    (Arc::clone(self), key.clone(), Arc::downgrade(&listed));
                tokio::spawn(async move { listing.renew(renewed, alive).await });
                v.insert(Waiting {
                    count: 0,
                    generation: 0,
                    _listed: listed,
                })
            }
        };
        w.count += 1;
        w.generation += 1;
        Ok(Subscribed {
            listing: Arc::clone(self),
            key: Some(key.clone()),
        })
    }

    /// Renews this backend's entry in `key`'s `waiting` while `alive` (the entry's handle
    /// in `waiting`) lives.
    ///
    /// It never takes `waiting`'s mutex: a renewal stuck until its deadline (a partition)
    /// must not hold back the subscriptions of other keys, one deadline per key listed. A
    /// renewal that lands just after the entry was taken out lists the process again
    /// until its lease ends: releases of that key notify for nothing meanwhile.
    ///
    /// A renewal that failed (a call past its deadline on a loaded server, a cut
    /// connection) is tried again after [`RENEWAL_RETRY`], not a whole [`WAIT_RENEWAL`]
    /// later: until it lands, a row made again lists no waiter and releases wake nobody.
    async fn renew(&self, key: Key, alive: Weak<()>) {
        let mut pause = WAIT_RENEWAL;
        loop {
            tokio::time::sleep(pause).await;
            if alive.strong_count() == 0 {
                return;
            }
            pause = match self.list(&key).await {
                Ok(()) => WAIT_RENEWAL,
                Err(e) => {
                    tracing::debug!(key = key.as_str(), "could not renew a waiter's entry: {e}");
                    RENEWAL_RETRY
                }
            };
        }
    }

    /// The reverse of [`Listing::start`], when a waiter's subscription is dropped: after
    /// the last one, and [`LINGER`] without a new one, takes the process out. A failure
    /// leaves its entry until its lease ends: releases of that key notify for nothing
    /// meanwhile.
    async fn stop(&self, key: &Key) {
        let generation = {
            let mut waiting = self.waiting.lock().await;
            let Some(w) = waiting.get_mut(key.as_str()) else {
                return;
            };
            w.count = w.count.saturating_sub(1);
            if w.count > 0 {
                return;
            }
            w.generation
        };
        tokio::time::sleep(LINGER).await;
        let mut waiting = self.waiting.lock().await;
        match waiting.get(key.as_str()) {
            Some(w) if w.count == 0 && w.generation == generation => {}
            _ => return,
        }
        let args = Args {
            token: Some(&self.id),
            ..Args::default()
        };
        if let Err(e) = self
            .db
            .call(Operation::Subscribe, "unwait", key, args)
            .await
        {
            tracing::debug!(
                key = key.as_str(),
                "could not take a waiter's entry out: {e}"
            );
        }
        waiting.remove(key.as_str());
    }
}

/// Kept by a waiter's subscription: its drop takes the waiter out.
pub(crate) struct Subscribed {
    listing: Arc<Listing>,
    key: Option<Key>,
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        let (Some(key), Ok(runtime)) = (self.key.take(), tokio::runtime::Handle::try_current())
        else {
            // No runtime (the process is ending): the entry stays until its lease ends,
            // which costs only notifications nobody hears.
            return;
        };
        let listing = Arc::clone(&self.listing);
        runtime.spawn(async move { listing.stop(&key).await });
    }
}
