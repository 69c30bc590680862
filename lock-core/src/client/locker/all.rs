//! Several keys at once, all or nothing: [`Locker::lock_all`], its builder and the guard of
//! the whole set.
//!
//! # How the keys are taken
//! The keys are sorted (by their full key, prefix included) and taken one by one in that
//! order, **never waiting while holding any of them**: each key is tried once; if one is
//! busy, every key already taken is released, and the caller waits for that key alone,
//! holding nothing, before it tries the whole set again (with the key it waited for
//! first). Two callers with overlapping sets, in any order, therefore never deadlock:
//! nobody who waits holds anything another could be waiting for. The price is that a
//! caller whose keys are busy in turn may try the set several times within its wait.
//!
//! Every key is an ordinary hold of the backend, with its own fencing token and its own
//! ttl (the same for all). Nothing here needs an atomic multi-key call of a backend, and
//! none is used: on a Redis Cluster the keys may live in different slots.
//!
//! # What is left behind
//! When a key stays busy past the wait, when a call fails, or when the caller is cancelled,
//! the keys already taken are released: explicitly on busy and on error, and by each
//! guard's drop (a release in the background) on cancellation. A release that itself fails
//! leaves that key held by nobody until its ttl ends, as for any guard.

use std::fmt;
use std::time::Duration;

use futures_util::future::select_all;
use tokio::time::Instant;

use super::{Attempt, Locker};
use crate::{
    Error, ErrorKind, Fencing, Key, LockGuard, LostFuture, Operation, ReleaseOutcome, Result, Retry,
};

/// An obtain of several keys at once: from [`Locker::lock_all`].
#[must_use = "a lock builder does nothing until try_obtain() or obtain() is awaited"]
pub struct LockAllBuilder<'a> {
    locker: &'a Locker,
    /// The keys as given (without the locker's prefix), checked by the obtain.
    keys: Vec<String>,
    ttl: Option<Duration>,
    wait: Duration,
    retry: Retry,
    metadata: Option<String>,
    watchdog: Option<f64>,
    read: bool,
}

impl<'a> LockAllBuilder<'a> {
    pub(super) fn new(locker: &'a Locker, keys: Vec<String>) -> Self {
        LockAllBuilder {
            locker,
            keys,
            ttl: None,
            wait: locker.wait,
            retry: locker.retry.clone(),
            metadata: None,
            watchdog: None,
            read: false,
        }
    }

    /// How long every key stays valid without prolonging (a bad value is reported by the
    /// obtain).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long [`LockAllBuilder::obtain`] may wait for the whole set, in all;
    /// [`Duration::MAX`] means until obtained.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The retry strategy while waiting for a busy key.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Metadata for every key of the set, replacing the locker's default.
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }

    /// Prolongs every key in the background, as [`LockBuilder::watchdog`](crate::LockBuilder::watchdog)
    /// does for one: the locker's one renewal task sends them together.
    pub fn watchdog(self) -> Self {
        self.watchdog_every(Locker::DEFAULT_WATCHDOG_FRACTION)
    }

    /// Takes every key as a read hold (see [`Locker::read`]): shared with other readers of
    /// each key, exclusive of its writers. The order and the rule "never wait while
    /// holding" are the same, so readers and writers of overlapping sets never deadlock.
    ///
    /// A set of read holds on some keys and write holds on others, and a set of semaphore
    /// permits, are not offered: a mixed set is rare enough that one `lock_all` of the
    /// whole set as writes is the simpler answer, and permits of different semaphores have
    /// no common count to ask for.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let a = locker.lock_all(["rates", "fees"]).read().try_obtain().await?.obtained().expect("free");
    /// let b = locker.lock_all(["fees", "rates"]).read().try_obtain().await?.obtained().expect("readers share");
    /// assert!(locker.lock_all(["fees"]).try_obtain().await?.is_busy()); // a writer waits
    /// a.release().await?;
    /// b.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(mut self) -> Self {
        self.read = true;
        self
    }

    /// Like [`LockAllBuilder::watchdog`], prolonging every `fraction` of the ttl.
    pub fn watchdog_every(mut self, fraction: f64) -> Self {
        self.watchdog = Some(fraction);
        self
    }

    /// One try of each key, no waiting: every key, or [`Attempt::Busy`] with the first
    /// busy key's answer and nothing held.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for an empty set, a bad key, ttl or metadata (before
    /// any I/O); otherwise the first failed call's error, after every key taken was
    /// released.
    ///
    /// # Cancel safety
    /// Cancel safe: every key taken so far is released in the background by its guard's
    /// drop, and a grant still in flight is given back (see [`LockBuilder::try_obtain`](crate::LockBuilder::try_obtain)).
    pub async fn try_obtain(self) -> Result<Attempt<MultiGuard>> {
        let keys = self.checked_keys()?;
        match self.take_all(&keys, None).await? {
            Taken::All(guards) => Ok(Attempt::Obtained(MultiGuard { guards })),
            Taken::Busy(_, busy) => Ok(Attempt::Busy(busy)),
        }
    }

    /// Takes every key, waiting (up to the wait, with the retry strategy) for each key
    /// that is busy while holding none: see the module's docs for the order.
    ///
    /// # Errors
    /// As for [`LockAllBuilder::try_obtain`].
    ///
    /// # Cancel safety
    /// As for [`LockAllBuilder::try_obtain`]: nothing is left held.
    pub async fn obtain(self) -> Result<Attempt<MultiGuard>> {
        let keys = self.checked_keys()?;
        let deadline = Instant::now().checked_add(self.wait);
        let mut first = None;
        loop {
            match self.take_all(&keys, first.map(|i| (i, deadline))).await? {
                Taken::All(guards) => return Ok(Attempt::Obtained(MultiGuard { guards })),
                Taken::Busy(i, busy) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(Attempt::Busy(busy));
                    }
                    // Waiting for key `i` gave up (its wait ran out): so does the set.
                    if first == Some(i) {
                        return Ok(Attempt::Busy(busy));
                    }
                    first = Some(i);
                }
            }
        }
    }

    /// The full keys, sorted and without repeats; an empty set or a bad key is refused.
    fn checked_keys(&self) -> Result<Vec<Key>> {
        if self.keys.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "lock-core",
                Operation::Obtain,
                "lock_all needs at least one key",
            ));
        }
        let mut keys = self
            .keys
            .iter()
            .map(|k| self.locker.key(k))
            .collect::<Result<Vec<_>>>()?;
        keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        keys.dedup();
        Ok(keys)
    }

    /// One pass over `keys` in order. With `wait_for = Some((i, deadline))`, key `i` is
    /// waited for first (nothing held yet), then the others are tried in order.
    async fn take_all(
        &self,
        keys: &[Key],
        wait_for: Option<(usize, Option<Instant>)>,
    ) -> Result<Taken> {
        let mut guards: Vec<Option<LockGuard>> = Vec::with_capacity(keys.len());
        guards.resize_with(keys.len(), || None);
        let order = wait_for
            .map(|(i, _)| i)
            .into_iter()
            .chain((0..keys.len()).filter(|&j| wait_for.is_none_or(|(i, _)| i != j)));
        for i in order {
            let mut one = self.one(&keys[i]);
            let attempt = match wait_for {
                Some((first, deadline)) if first == i => {
                    let left = deadline.map_or(Duration::MAX, |d| {
                        d.saturating_duration_since(Instant::now())
                    });
                    one = one.wait(left).retry(self.retry.clone());
                    one.obtain().await
                }
                _ => one.try_obtain().await,
            };
            match attempt {
                Ok(Attempt::Obtained(guard)) => guards[i] = Some(guard),
                Ok(Attempt::Busy(busy)) => {
                    give_back(guards.into_iter().flatten()).await;
                    return Ok(Taken::Busy(i, busy));
                }
                Err(e) => {
                    give_back(guards.into_iter().flatten()).await;
                    return Err(e);
                }
            }
        }
        Ok(Taken::All(guards.into_iter().flatten().collect()))
    }

    /// The obtain of one key of the set, with the set's settings.
    fn one(&self, key: &Key) -> crate::LockBuilder<'a> {
        // `key` is already prefixed: built on the unprefixed locker path.
        let mut one = crate::LockBuilder::new(self.locker, key.as_str().to_owned());
        if self.read {
            one = one.in_mode(crate::Mode::READ);
        }
        if let Some(ttl) = self.ttl {
            one = one.ttl(ttl);
        }
        if let Some(m) = &self.metadata {
            one = one.metadata(m.clone());
        }
        if let Some(fraction) = self.watchdog {
            one = one.watchdog_every(fraction);
        }
        one
    }
}

/// What one pass over the set came to.
enum Taken {
    All(Vec<LockGuard>),
    /// Key `.0` (its index in the sorted set) was busy; nothing is held.
    Busy(usize, crate::Busy),
}

/// Releases `guards` in the reverse of the order they were taken; a failure is logged
/// (that key expires after its ttl).
async fn give_back(guards: impl DoubleEndedIterator<Item = LockGuard>) {
    for guard in guards.rev() {
        let key = guard.key().clone();
        if let Err(e) = guard.release().await {
            tracing::warn!(%key, "giving back a key of lock_all failed, it expires after its ttl: {e}");
        }
    }
}

/// Every key of a [`Locker::lock_all`], held: one guard per key, in the set's order.
///
/// Dropping it drops each key's guard: each is released in the background (see
/// [`LockGuard`]). Prefer [`MultiGuard::release`].
#[must_use = "dropping a MultiGuard releases every key in the background; call release()"]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// Each key's guard, in the set's order (sorted by full key).
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guards themselves, to release or keep one by one.
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// Each key with its fencing token, in the set's order.
    pub fn fencing(&self) -> impl Iterator<Item = (&Key, Fencing)> {
        self.guards.iter().map(|g| (g.key(), g.fencing()))
    }

    /// The shortest validity left of any key.
    pub fn remaining(&self) -> Duration {
        self.guards
            .iter()
            .map(LockGuard::remaining)
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// Whether any key is lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves when any key is lost (see [`LockGuard::lost`]): stop acting on the set.
    ///
    /// # Cancel safety
    /// Cancel safe: the future only waits.
    pub async fn lost(&self) {
        let all: Vec<LostFuture> = self.guards.iter().map(LockGuard::lost).collect();
        select_all(all).await;
    }

    /// Releases every key, in the reverse of the set's order, each even when another
    /// failed: each key's outcome, or the first error.
    ///
    /// # Errors
    /// The first key's release that failed (every other key was still released).
    ///
    /// # Cancel safety
    /// Dropping the future releases the keys not yet released in the background.
    pub async fn release(self) -> Result<Vec<(Key, ReleaseOutcome)>> {
        let mut outcomes = Vec::with_capacity(self.guards.len());
        let mut failed = None;
        for guard in self.guards.into_iter().rev() {
            let key = guard.key().clone();
            match guard.release().await {
                Ok(outcome) => outcomes.push((key, outcome)),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => {
                outcomes.reverse();
                Ok(outcomes)
            }
        }
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard")
            .field(
                "keys",
                &self.guards.iter().map(LockGuard::key).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}
