//! The waiters of a backend's release notifications, woken one at a time.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::watch;

use crate::backend::rules::Wake;
use crate::ReleaseSubscription;

type Queues = HashMap<String, VecDeque<Waiter>>;

/// The processes' waiters of each key, for a backend that implements
/// [`LockBackend::subscribe`](crate::LockBackend::subscribe): one release wakes *one*
/// waiter of its key, the longest-waiting, which then goes to the back of the line.
///
/// Only one waiter can win a released lock; waking them all makes each attempt, and all but
/// one of those attempts is wasted work for the server (on Postgres they even queue on the
/// key's lock behind the winner's commit). A woken waiter that loses to another process
/// waits for the next release like the rest. When a notification may have been missed (the
/// notification connection dropped), wake everyone with [`Waiters::wake_all`]; waiters keep
/// their fallback poll either way.
///
/// Cheap to clone; clones share the queues.
///
/// ```
/// use std::time::Duration;
/// use lock_core::backend::Waiters;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let waiters = Waiters::default();
/// let mut first = waiters.subscribe("job");
/// let mut second = waiters.subscribe("job");
/// waiters.wake_one("job"); // a release of "job" was announced
/// assert!(first.released_within(Duration::from_millis(10)).await);
/// assert!(!second.released_within(Duration::from_millis(10)).await);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Waiters {
    queues: Arc<Mutex<Queues>>,
    next_id: Arc<AtomicU64>,
}

struct Waiter {
    id: u64,
    tx: watch::Sender<u64>,
}

impl Waiter {
    fn wake(&self) {
        self.tx.send_modify(|n| *n += 1);
    }
}

/// Takes a waiter out of its key's line when its subscription is dropped.
struct Registration {
    key: String,
    id: u64,
    queues: Weak<Mutex<Queues>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(queues) = self.queues.upgrade() else {
            return;
        };
        let mut q = lock(&queues);
        if let Some(line) = q.get_mut(&self.key) {
            line.retain(|w| w.id != self.id);
            if line.is_empty() {
                q.remove(&self.key);
            }
        }
    }
}

fn lock(m: &Mutex<Queues>) -> std::sync::MutexGuard<'_, Queues> {
    // Every change is a single push, pop or retain: a panic elsewhere cannot leave a line
    // half-changed.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Waiters {
    /// Puts a new waiter at the back of `key`'s line; dropping the subscription takes it
    /// out.
    pub fn subscribe(&self, key: &str) -> ReleaseSubscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = watch::channel(0);
        lock(&self.queues)
            .entry(key.to_owned())
            .or_default()
            .push_back(Waiter { id, tx });
        let registration = Registration {
            key: key.to_owned(),
            id,
            queues: Arc::downgrade(&self.queues),
        };
        ReleaseSubscription::new(rx, Some(Box::new(registration)))
    }

    /// Wakes the longest-waiting waiter of `key`, which then goes to the back of the line.
    pub fn wake_one(&self, key: &str) {
        let mut q = lock(&self.queues);
        if let Some(line) = q.get_mut(key) {
            if let Some(first) = line.pop_front() {
                first.wake();
                line.push_back(first);
            }
        }
    }

    /// Wakes every waiter of `key`: for a release after which several may get in (shared
    /// holds), or the one that can is not first in line (a waiting writer).
    pub fn wake_key(&self, key: &str) {
        if let Some(line) = lock(&self.queues).get(key) {
            for waiter in line {
                waiter.wake();
            }
        }
    }

    /// Wakes whom a decision's write frees room for ([`Decision::wake`](crate::backend::rules::Decision::wake)):
    /// nobody, the longest-waiting waiter ([`Waiters::wake_one`]) or all of them
    /// ([`Waiters::wake_key`]). Call it once the write is stored, never before: a woken
    /// waiter attempts at once, and must find the write.
    pub fn wake(&self, key: &str, whom: Wake) {
        match whom {
            Wake::Nobody => {}
            Wake::One => self.wake_one(key),
            Wake::All => self.wake_key(key),
        }
    }

    /// Wakes every waiter of every key: for when a release may have gone unannounced.
    pub fn wake_all(&self) {
        for waiter in lock(&self.queues).values().flatten() {
            waiter.wake();
        }
    }

    /// The keys someone waits for now.
    pub fn keys(&self) -> Vec<String> {
        lock(&self.queues).keys().cloned().collect()
    }

    /// Whether someone waits for `key` now.
    pub fn is_waited(&self, key: &str) -> bool {
        lock(&self.queues).contains_key(key)
    }
}

impl fmt::Debug for Waiters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiters")
            .field("keys", &lock(&self.queues).len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn releases_wake_one_waiter_each_in_turn() {
        let waiters = Waiters::default();
        let mut a = waiters.subscribe("k");
        let mut b = waiters.subscribe("k");
        let mut other = waiters.subscribe("other");
        let short = Duration::from_millis(1);
        for round in 0..3 {
            waiters.wake_one("k");
            assert!(a.released_within(short).await, "round {round}: a first");
            assert!(!b.released_within(short).await);
            waiters.wake_one("k");
            assert!(b.released_within(short).await, "round {round}: then b");
            assert!(!a.released_within(short).await);
        }
        assert!(!other.released_within(short).await, "another key sleeps");
        waiters.wake_all();
        assert!(other.released_within(short).await);
        drop(a);
        drop(b);
        assert!(
            !waiters.is_waited("k"),
            "dropped subscriptions leave the line"
        );
        assert_eq!(waiters.keys(), vec!["other".to_owned()]);
    }
}
