//! The waiters of a backend's release notifications, woken one at a time.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::watch;

use crate::backend::rules::Wake;
use crate::ReleaseSubscription;

type Queues = HashMap<String, Line>;

/// One key's waiters: those in line for the lock, and those that only watch it (an
/// observer of who leads), woken by every release without a place in the line.
#[derive(Default)]
struct Line {
    waiting: VecDeque<Waiter>,
    watching: Vec<Waiter>,
}

impl Line {
    fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.watching.is_empty()
    }

    fn wake_watchers(&self) {
        for watcher in &self.watching {
            watcher.wake();
        }
    }

    fn wake_first(&mut self) {
        if let Some(first) = self.waiting.pop_front() {
            first.wake();
            self.waiting.push_back(first);
        }
    }
}

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

/// A waiter's place in its key's line: taken out when its subscription is dropped.
pub(crate) struct Registration {
    key: String,
    id: u64,
    queues: Weak<Mutex<Queues>>,
}

impl Registration {
    /// Moves the waiter out of the line to the key's watchers: woken by every release, it
    /// never takes a waiter's turn. A release that woke it while it stood in line is handed
    /// on to the next waiter.
    pub(crate) fn watch_only(&self) {
        let Some(queues) = self.queues.upgrade() else {
            return;
        };
        let mut q = lock(&queues);
        let Some(line) = q.get_mut(&self.key) else {
            return;
        };
        let Some(at) = line.waiting.iter().position(|w| w.id == self.id) else {
            return;
        };
        if let Some(waiter) = line.waiting.remove(at) {
            let woken = *waiter.tx.borrow() > 0;
            line.watching.push(waiter);
            if woken {
                line.wake_first();
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(queues) = self.queues.upgrade() else {
            return;
        };
        let mut q = lock(&queues);
        if let Some(line) = q.get_mut(&self.key) {
            line.waiting.retain(|w| w.id != self.id);
            line.watching.retain(|w| w.id != self.id);
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
            .waiting
            .push_back(Waiter { id, tx });
        let registration = Registration {
            key: key.to_owned(),
            id,
            queues: Arc::downgrade(&self.queues),
        };
        ReleaseSubscription::in_line(rx, registration)
    }

    /// Wakes the longest-waiting waiter of `key`, which then goes to the back of the line,
    /// and every watcher of `key` ([`ReleaseSubscription::watch_only`]).
    pub fn wake_one(&self, key: &str) {
        let mut q = lock(&self.queues);
        if let Some(line) = q.get_mut(key) {
            line.wake_first();
            line.wake_watchers();
        }
    }

    /// Wakes every waiter of `key`: for a release after which several may get in (shared
    /// holds), or the one that can is not first in line (a waiting writer).
    pub fn wake_key(&self, key: &str) {
        if let Some(line) = lock(&self.queues).get(key) {
            for waiter in &line.waiting {
                waiter.wake();
            }
            line.wake_watchers();
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
        for line in lock(&self.queues).values() {
            for waiter in &line.waiting {
                waiter.wake();
            }
            line.wake_watchers();
        }
    }

    /// The keys someone waits for or watches now.
    pub fn keys(&self) -> Vec<String> {
        lock(&self.queues).keys().cloned().collect()
    }

    /// Whether someone waits for or watches `key` now.
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

    /// A watcher (an observer of who leads) is woken by every release and never takes a
    /// waiter's turn; a release that woke it while it still stood in line is handed on.
    #[tokio::test(start_paused = true)]
    async fn a_watcher_never_takes_a_waiter_s_turn() {
        let waiters = Waiters::default();
        let short = Duration::from_millis(1);
        let mut watcher = waiters.subscribe("k");
        let mut a = waiters.subscribe("k");
        let mut b = waiters.subscribe("k");
        watcher.watch_only();
        waiters.wake_one("k");
        assert!(a.released_within(short).await, "the first waiter");
        assert!(!b.released_within(short).await);
        assert!(watcher.released_within(short).await, "the watcher too");
        waiters.wake_one("k");
        assert!(b.released_within(short).await, "then the second");
        assert!(watcher.released_within(short).await);
        waiters.wake_key("k");
        assert!(a.released_within(short).await && b.released_within(short).await);
        assert!(watcher.released_within(short).await);

        // Woken in line before it became a watcher: the turn goes on to the next waiter.
        let mut late = waiters.subscribe("j");
        let mut next = waiters.subscribe("j");
        waiters.wake_one("j");
        late.watch_only();
        assert!(next.released_within(short).await, "the turn handed on");
        assert!(late.released_within(short).await);
        drop((late, next, watcher, a, b));
        assert!(waiters.keys().is_empty(), "{:?}", waiters.keys());
    }
}
