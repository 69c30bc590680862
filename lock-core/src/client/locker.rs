//! The client API over any backend: the locker with its defaults, inspect and release-all;
//! the obtain builder and its plan are in `obtain`, `with_lock` in `with_lock`.

mod all;
mod elect;
mod marker;
mod obtain;
mod with_lock;

pub use all::{LockAllBuilder, MultiGuard};
pub use elect::{Campaign, Leader, Leadership, Observation};
pub use obtain::LockBuilder;
pub use with_lock::HeldLock;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::detached::detached;
use crate::client::registry::Registry;
use crate::observe::{LockerStats, Observer, Telemetry};
use crate::{
    Busy, HolderInfo, Key, LockBackend, LockState, Mode, ReleaseOutcome, Result, Retry, Ttl,
};

/// What an obtain came to: the lock, or who has it.
#[derive(Debug)]
#[must_use]
pub enum Attempt<T> {
    /// The lock was obtained (for [`Locker::with_lock`], the closure's result).
    Obtained(T),
    /// It was not obtained within the wait; the last answer said why.
    Busy(Busy),
}

impl<T> Attempt<T> {
    /// The obtained value, or `None` when busy.
    pub fn obtained(self) -> Option<T> {
        match self {
            Attempt::Obtained(t) => Some(t),
            Attempt::Busy(_) => None,
        }
    }

    /// Whether the lock was not obtained.
    pub fn is_busy(&self) -> bool {
        matches!(self, Attempt::Busy(_))
    }

    /// The obtained value, or the last [`Busy`] answer as an error value.
    pub fn into_result(self) -> std::result::Result<T, Busy> {
        match self {
            Attempt::Obtained(t) => Ok(t),
            Attempt::Busy(b) => Err(b),
        }
    }
}

/// The entry point: a backend plus the defaults every lock taken through it starts from.
///
/// Cheap to clone; clones share the set of held locks that [`Locker::release_all`] gives
/// back.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use lock_core::{Attempt, Locker, MemoryBackend, Retry};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let locker = Locker::new(Arc::new(MemoryBackend::new()))
///     .with_prefix("billing:")
///     .with_ttl(Duration::from_secs(30))?
///     .with_retry(Retry::exponential(Duration::from_millis(10), Duration::from_millis(500)));
///
/// match locker.lock("invoice-42").wait(Duration::from_secs(5)).obtain().await? {
///     Attempt::Obtained(guard) => {
///         println!("fencing token {}", guard.fencing());
///         guard.release().await?;
///     }
///     Attempt::Busy(busy) => println!("gave up: {busy}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    backend: Arc<dyn LockBackend>,
    prefix: String,
    ttl: Ttl,
    wait: Duration,
    retry: Retry,
    holder: Arc<HolderInfo>,
    registry: Arc<Registry>,
    telemetry: Telemetry,
}

impl Locker {
    /// The default ttl: 30 s.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
    /// The default wait of [`LockBuilder::obtain`]: 10 s.
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);
    /// The default watchdog period, as a fraction of the ttl.
    pub const DEFAULT_WATCHDOG_FRACTION: f64 = 1.0 / 3.0;

    /// A locker over `backend` with the defaults: no prefix, 30 s ttl, 10 s wait,
    /// [`Retry::default`], this host and process as holder.
    pub fn new(backend: Arc<dyn LockBackend>) -> Self {
        Locker {
            backend,
            prefix: String::new(),
            ttl: Ttl::new(Self::DEFAULT_TTL).unwrap_or(Ttl::MAX),
            wait: Self::DEFAULT_WAIT,
            retry: Retry::default(),
            holder: Arc::new(HolderInfo::current()),
            registry: Arc::default(),
            telemetry: Telemetry::default(),
        }
    }

    /// Hands every event of the locks taken through this locker to `observer`: obtains
    /// with their waits and attempts, holds with how they ended, losses with their cause,
    /// the watchdog's batches, backend errors (see [`observe`](crate::observe)). One
    /// observer per locker: this replaces an earlier one.
    ///
    /// Clones made after this call share the observer; clones made before keep theirs.
    /// All of them share the counters of [`Locker::stats`].
    ///
    /// ```
    /// # #[cfg(feature = "metrics")] {
    /// use std::sync::Arc;
    /// use lock_core::{Locker, MemoryBackend, observe::metrics::MetricsObserver};
    ///
    /// // Recorded through the `metrics` facade: the application installs the exporter.
    /// let locker = Locker::new(Arc::new(MemoryBackend::new()))
    ///     .with_observer(Arc::new(MetricsObserver::new()));
    /// # }
    /// ```
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.telemetry = self.telemetry.with_observer(observer);
        self
    }

    /// What this locker and its clones hold, wait for, and have done: a snapshot of
    /// counters kept whether or not an observer is set.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use lock_core::{Locker, MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let guard = locker.lock("a").try_obtain().await?.obtained().unwrap();
    /// assert!(locker.lock("a").try_obtain().await?.is_busy());
    /// let stats = locker.stats();
    /// assert_eq!((stats.held, stats.obtained, stats.busy), (1, 1, 1));
    /// guard.release().await?;
    /// assert_eq!(locker.stats().held, 0);
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> LockerStats {
        self.telemetry.stats()
    }

    /// Prepends `prefix` to every key (on top of the backend's own namespace).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The default ttl.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) outside 1 ms ..= 365 days.
    pub fn with_ttl(mut self, ttl: Duration) -> Result<Self> {
        self.ttl = Ttl::new(ttl)?;
        Ok(self)
    }

    /// The default wait of [`LockBuilder::obtain`]. [`Duration::MAX`] (or any wait over
    /// thirty years) means: until obtained.
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The default retry strategy.
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Default holder metadata, shown to anyone who inspects a lock taken through this
    /// locker.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) over 4 KiB.
    pub fn with_metadata(mut self, metadata: impl Into<String>) -> Result<Self> {
        self.holder = Arc::new((*self.holder).clone().with_metadata(metadata)?);
        Ok(self)
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    /// What the backend says of `key` (the locker's prefix is prepended) now: free, held
    /// (holder, fencing token, remaining ttl, holds), shared (every hold, a waiting writer)
    /// or cooling. Changes nothing: the same call as `backend().inspect(&locker.key(k)?)`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use std::sync::Arc;
    /// use lock_core::{LockState, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// assert_eq!(locker.inspect("nightly-report").await?, LockState::Free);
    /// let guard = locker.lock("nightly-report").try_obtain().await?.obtained().expect("free");
    /// assert!(matches!(locker.inspect("nightly-report").await?, LockState::Held { .. }));
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a key the contract
    /// refuses, or the backend's error.
    ///
    /// # Cancel safety
    /// Cancel safe: a read; dropping the future changes nothing.
    pub async fn inspect(&self, key: impl AsRef<str>) -> Result<LockState> {
        let key = self.key(key)?;
        let span = tracing::debug_span!("lock.inspect", backend = self.backend.name(), key = %key);
        tracing::Instrument::instrument(self.backend.inspect(&key), span).await
    }

    /// Starts an obtain of `key` (the locker's prefix is prepended): one holder alone.
    pub fn lock(&self, key: impl AsRef<str>) -> LockBuilder<'_> {
        LockBuilder::new(self, self.prefixed(key.as_ref()))
    }

    /// Starts an exclusive obtain of `key`: the write side of a reader-writer lock, the
    /// same as [`Locker::lock`]. While it waits (with [`LockBuilder::obtain`]), new read
    /// holds stay out, so a stream of readers cannot starve it.
    pub fn write(&self, key: impl AsRef<str>) -> LockBuilder<'_> {
        self.lock(key)
    }

    /// Starts a shared obtain of `key`: any number of readers at once, no writer.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let a = locker.read("catalog").try_obtain().await?.obtained().expect("free");
    /// let b = locker.read("catalog").try_obtain().await?.obtained().expect("readers share");
    /// assert!(locker.write("catalog").try_obtain().await?.is_busy());
    /// a.release().await?;
    /// b.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self, key: impl AsRef<str>) -> LockBuilder<'_> {
        self.lock(key).in_mode(Mode::READ)
    }

    /// Starts an obtain of one of `permits` permits of the semaphore `key` (more with
    /// [`LockBuilder::weight`]). Every holder of a key must ask for the same `permits`: a
    /// different number is [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
    /// naming both. Each hold has its own ttl and fencing token: a holder that dies frees
    /// its own permits when its own ttl ends.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let two = locker.semaphore("exports", 3).weight(2).try_obtain().await?.obtained().expect("room");
    /// let one = locker.semaphore("exports", 3).try_obtain().await?.obtained().expect("room");
    /// assert!(locker.semaphore("exports", 3).try_obtain().await?.is_busy());
    /// two.release().await?;
    /// one.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, key: impl AsRef<str>, permits: u32) -> LockBuilder<'_> {
        self.lock(key).in_mode(Mode::Shared {
            capacity: permits,
            weight: 1,
        })
    }

    /// Starts an obtain of every key of `keys` at once, all or nothing (exclusive holds):
    /// one guard for the set, one wait and one retry strategy for the whole set, a fencing
    /// token per key. Keys are taken in one global order and never waited for while any is
    /// held, so two callers with overlapping sets never deadlock; a key that stays busy, a
    /// failed call or a cancelled caller leaves none of them held. Repeated keys count once.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let both = locker
    ///     .lock_all(["account:17", "account:4"])
    ///     .try_obtain()
    ///     .await?
    ///     .obtained()
    ///     .expect("both free");
    /// for (key, fencing) in both.fencing() {
    ///     println!("{key}: write with fencing token {fencing}");
    /// }
    /// // Another caller wanting either key gets Busy, and takes nothing.
    /// assert!(locker.lock_all(["account:4", "account:99"]).try_obtain().await?.is_busy());
    /// assert!(locker.lock("account:99").try_obtain().await?.obtained().is_some());
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<I, K>(&self, keys: I) -> LockAllBuilder<'_>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        let keys = keys.into_iter().map(|k| k.as_ref().to_owned()).collect();
        LockAllBuilder::new(self, keys)
    }

    /// Starts a campaign for the leadership of `key`: leader election over this locker's
    /// backend. The leader is the holder of `key`'s lock, kept by the watchdog; its term is
    /// the lock's fencing token (a successor's is higher). See [`Leadership`] for when a
    /// leadership ends; a leader that lost it does not campaign again by itself.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let leader = locker
    ///     .elect("scheduler")
    ///     .ttl(Duration::from_secs(10))
    ///     .identity("10.0.0.7:8080")
    ///     .lead()
    ///     .await?
    ///     .obtained()
    ///     .expect("nobody else campaigns");
    /// let mut who = locker.observe("scheduler")?;
    /// let now = who.changed().await?.expect("a leader");
    /// assert_eq!(now.term, leader.term());
    /// assert_eq!(now.holder.metadata.as_deref(), Some("10.0.0.7:8080"));
    /// leader.resign().await?;
    /// assert_eq!(who.changed().await?, None); // nobody leads now
    /// # Ok(()) }
    /// ```
    pub fn elect(&self, key: impl AsRef<str>) -> Campaign<'_> {
        Campaign::new(self, key.as_ref())
    }

    /// Follows who leads `key` (see [`Locker::elect`]), from any process.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad key.
    pub fn observe(&self, key: impl AsRef<str>) -> Result<Observation> {
        Ok(Observation::new(Arc::clone(&self.backend), self.key(key)?))
    }

    /// The full key for `key`, validated.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the prefixed key is not a valid [`Key`].
    pub fn key(&self, key: impl AsRef<str>) -> Result<Key> {
        Key::new(self.prefixed(key.as_ref()))
    }

    fn prefixed(&self, key: &str) -> String {
        let mut full = String::with_capacity(self.prefix.len() + key.len());
        full.push_str(&self.prefix);
        full.push_str(key);
        full
    }

    /// Gives back every lock still held through this locker (and its clones), for example at
    /// shutdown. Returns each key with its release's result; their guards then do nothing
    /// more on release or drop.
    ///
    /// # Cancel safety
    /// Cancel safe: the releases run in a task of their own and all complete even if this
    /// future is dropped (its results are then lost, not the releases).
    pub async fn release_all(&self) -> Vec<(Key, Result<ReleaseOutcome>)> {
        let held = self.registry.drain();
        let keys: Vec<Key> = held.iter().map(|given| given.hold().key.clone()).collect();
        let releases = async move {
            let mut outcomes = Vec::with_capacity(held.len());
            for given in held {
                outcomes.push(given.release(None).await);
            }
            Ok(outcomes)
        };
        match detached(releases).await {
            Ok(outcomes) => keys.into_iter().zip(outcomes).collect(),
            Err(e) => keys.into_iter().map(|k| (k, Err(e.clone()))).collect(),
        }
    }

    /// How many locks this locker and its clones hold now.
    pub fn held_count(&self) -> usize {
        self.registry.len()
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}
