//! What a [`Locker`](crate::Locker)'s locks do, for an operator: an [`Observer`] called on
//! every event of the client layer, and [`LockerStats`], a snapshot of its counters.
//!
//! ```
//! use std::sync::{atomic::{AtomicU64, Ordering}, Arc};
//! use lock_core::{Locker, MemoryBackend};
//! use lock_core::observe::{Event, LostCause, Observer};
//!
//! /// Counts the locks lost because their validity ran out (a partition, a slow server).
//! #[derive(Debug, Default)]
//! struct ExpiredLocks(AtomicU64);
//!
//! impl Observer for ExpiredLocks {
//!     fn event(&self, event: &Event<'_>) {
//!         if let Event::Lost { cause: LostCause::Expired, .. } = event {
//!             self.0.fetch_add(1, Ordering::Relaxed);
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! let expired = Arc::new(ExpiredLocks::default());
//! let locker = Locker::new(Arc::new(MemoryBackend::new())).with_observer(expired.clone());
//! let guard = locker.lock("nightly-report").try_obtain().await?.obtained().unwrap();
//! assert_eq!(locker.stats().held, 1);
//! guard.release().await?;
//! assert_eq!(locker.stats().obtained, 1);
//! assert_eq!(expired.0.load(Ordering::Relaxed), 0);
//! # Ok(()) }
//! ```
//!
//! # When events come
//! An observer is called synchronously, on the task where the event happens (the caller's,
//! the watchdog's, a background release's), never while the client layer holds a lock of
//! its own: keep it quick and never block in it. A panic in an observer is caught and
//! logged, and the event is lost to it; the lock is not affected.
//!
//! Every obtain gives one [`Event::ObtainStarted`] and one [`Event::ObtainEnded`], even
//! when its future is dropped (then with [`ObtainEnd::Cancelled`]). Every acquisition
//! gives one [`Event::HoldStarted`] and one [`Event::HoldEnded`]; reentrant guards share
//! their acquisition's. [`Event::Lost`] comes once per acquisition, at the moment the
//! client layer knows it: a `Lost` answer, or the validity's end while someone listens to
//! the lost signal or a watchdog renews it (an unwatched guard nobody asks finds out at its
//! release).

mod stats;
mod telemetry;

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;

pub use stats::LockerStats;
pub(crate) use telemetry::{ObtainWatch, Telemetry};

use std::fmt;
use std::time::Duration;

use crate::{ErrorKind, Key, Mode, Operation};

/// Watches a [`Locker`](crate::Locker)'s locks: set with
/// [`Locker::with_observer`](crate::Locker::with_observer).
///
/// Implement it to feed a metrics system, an audit log or a test's counters; with the
/// `metrics` feature, [`metrics::MetricsObserver`] records every event through the
/// [`metrics`](https://docs.rs/metrics) facade. See the [module docs](self) for when each
/// event comes.
pub trait Observer: Send + Sync + 'static {
    /// Called on every event. Keep it quick: it runs inline on the task the event
    /// happens on.
    fn event(&self, event: &Event<'_>);
}

/// One thing that happened to a lock. Keys are the full keys, the locker's prefix
/// included; owner tokens never appear.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// An obtain ([`LockBuilder::try_obtain`](crate::LockBuilder::try_obtain) or
    /// [`LockBuilder::obtain`](crate::LockBuilder::obtain)) started: a task now waits for
    /// the lock.
    #[non_exhaustive]
    ObtainStarted {
        /// The backend's name.
        backend: &'static str,
        /// The key.
        key: &'a Key,
        /// The mode asked for.
        mode: Mode,
    },
    /// An obtain ended.
    #[non_exhaustive]
    ObtainEnded {
        /// The backend's name.
        backend: &'static str,
        /// The key.
        key: &'a Key,
        /// The mode asked for.
        mode: Mode,
        /// How it ended.
        end: ObtainEnd,
        /// From its start to its end, attempts and pauses between them included (on the
        /// monotonic clock).
        waited: Duration,
        /// Calls to the backend's `obtain` it made (0 when it was cancelled before the
        /// first answer).
        attempts: u32,
    },
    /// A fresh acquisition began: a guard holds the lock. Reentrant guards do not start
    /// one.
    #[non_exhaustive]
    HoldStarted {
        /// The backend's name.
        backend: &'static str,
        /// The key.
        key: &'a Key,
        /// The mode held.
        mode: Mode,
    },
    /// An acquisition ended: its last guard was given back (the backend answered, or the
    /// call failed), or it was lost and replaced.
    #[non_exhaustive]
    HoldEnded {
        /// The backend's name.
        backend: &'static str,
        /// The key.
        key: &'a Key,
        /// The mode held at the end.
        mode: Mode,
        /// From the grant to the end.
        held: Duration,
        /// How it ended.
        end: HoldEnd,
    },
    /// A lock was lost, and its lost signal fired.
    #[non_exhaustive]
    Lost {
        /// The backend's name.
        backend: &'static str,
        /// The key.
        key: &'a Key,
        /// Why.
        cause: LostCause,
    },
    /// A watchdog's batch of renewals was answered (or failed as a whole).
    #[non_exhaustive]
    Renewal {
        /// The backend's name.
        backend: &'static str,
        /// Locks prolonged in the batch.
        locks: usize,
        /// Of those, how many failed (an error; each also gives an [`Event::BackendError`]).
        failed: usize,
        /// From sending the batch to its answer.
        latency: Duration,
    },
    /// A call to the backend failed.
    #[non_exhaustive]
    BackendError {
        /// The backend's name.
        backend: &'static str,
        /// The key, when the call had one (a watchdog's batch gives one event per lock).
        key: Option<&'a Key>,
        /// What kind of failure.
        kind: ErrorKind,
        /// Which call.
        operation: Operation,
    },
}

impl Event<'_> {
    /// The name of the backend it happened on.
    pub fn backend(&self) -> &'static str {
        match *self {
            Event::ObtainStarted { backend, .. }
            | Event::ObtainEnded { backend, .. }
            | Event::HoldStarted { backend, .. }
            | Event::HoldEnded { backend, .. }
            | Event::Lost { backend, .. }
            | Event::Renewal { backend, .. }
            | Event::BackendError { backend, .. } => backend,
        }
    }
}

/// How an obtain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ObtainEnd {
    /// The lock was obtained.
    Obtained,
    /// Not obtained: a `try_obtain` found it held, or a waiting obtain gave up early (its
    /// retry strategy ran out, or `dont_queue` saw the holder outlast the wait).
    Busy,
    /// Not obtained: the wait ran out while the lock was held.
    TimedOut,
    /// The obtain's future was dropped before it ended.
    Cancelled,
    /// The obtain failed with an error of this kind.
    Failed(ErrorKind),
}

impl ObtainEnd {
    /// How an obtain that returned `result` ended; `timed_out`: its wait ran out.
    pub(crate) fn of<T>(result: &crate::Result<crate::Attempt<T>>, timed_out: bool) -> Self {
        match result {
            Ok(crate::Attempt::Obtained(_)) => ObtainEnd::Obtained,
            Ok(crate::Attempt::Busy(_)) if timed_out => ObtainEnd::TimedOut,
            Ok(crate::Attempt::Busy(_)) => ObtainEnd::Busy,
            Err(e) => ObtainEnd::Failed(e.kind()),
        }
    }

    /// A short lowercase name: `obtained`, `busy`, `timeout`, `cancelled`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            ObtainEnd::Obtained => "obtained",
            ObtainEnd::Busy => "busy",
            ObtainEnd::TimedOut => "timeout",
            ObtainEnd::Cancelled => "cancelled",
            ObtainEnd::Failed(_) => "error",
        }
    }
}

/// How an acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldEnd {
    /// Released in time.
    Released,
    /// Released after it had expired, but nobody had taken it meanwhile
    /// ([`ReleaseOutcome::ReleasedLate`](crate::ReleaseOutcome::ReleasedLate)), before
    /// its lost signal fired (once it has fired, the hold ends as `Lost`).
    Late,
    /// Lost while held (whatever its release then answered): see [`LostCause`].
    Lost,
    /// Its last guard was dropped without a release: it was released in the background,
    /// or, outside a runtime, left to expire.
    Dropped,
    /// Its release failed; the lock expires with its ttl at the latest.
    Failed,
}

impl HoldEnd {
    /// A short lowercase name: `released`, `late`, `lost`, `dropped`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldEnd::Released => "released",
            HoldEnd::Late => "late",
            HoldEnd::Lost => "lost",
            HoldEnd::Dropped => "dropped",
            HoldEnd::Failed => "failed",
        }
    }
}

/// Why a lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostCause {
    /// Its validity ran out before a prolong renewed it: a partition, a slow or stopped
    /// backend, a watchdog that could not get through, or no watchdog at all.
    Expired,
    /// The backend answered that the lock is no longer this holder's: another holder took
    /// it after it expired, or its record is gone (a forced release, a server that lost
    /// its data).
    Taken,
}

impl LostCause {
    /// A short lowercase name: `expired`, `taken`.
    pub fn as_str(self) -> &'static str {
        match self {
            LostCause::Expired => "expired",
            LostCause::Taken => "taken",
        }
    }
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}
display_as_str!(ObtainEnd, HoldEnd, LostCause);
