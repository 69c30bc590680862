//! The counters every locker keeps, observer or not, and their snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a [`Locker`](crate::Locker) and its clones are doing, and have done since the
/// first of them was made: from [`Locker::stats`](crate::Locker::stats).
///
/// The counters only grow; the gauges (`held`, `waiting`) are now. Read twice and subtract
/// for rates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockerStats {
    /// Acquisitions held now (reentrant guards count with theirs).
    pub held: u64,
    /// Obtains in progress now (waiting ones, and attempts in flight).
    pub waiting: u64,
    /// Obtains that got the lock.
    pub obtained: u64,
    /// Obtains that found it held and gave up early (`try_obtain`, the retry strategy,
    /// `dont_queue`).
    pub busy: u64,
    /// Obtains whose wait ran out while the lock was held.
    pub timed_out: u64,
    /// Obtains whose future was dropped before they ended.
    pub cancelled: u64,
    /// Obtains that ended with an error.
    pub failed: u64,
    /// Acquisitions lost while held.
    pub lost: u64,
    /// Locks the watchdog prolonged (each lock of each batch).
    pub renewals: u64,
    /// Of those, prolongs that failed (and were retried).
    pub renewal_failures: u64,
    /// Backend calls that failed, every operation.
    pub backend_errors: u64,
}

/// The live counters behind [`LockerStats`], shared by a locker's clones.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) held: AtomicU64,
    pub(crate) waiting: AtomicU64,
    pub(crate) obtained: AtomicU64,
    pub(crate) busy: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) lost: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) renewal_failures: AtomicU64,
    pub(crate) backend_errors: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// A gauge down by one, never below zero.
    pub(crate) fn down(gauge: &AtomicU64) {
        let _ = gauge.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    pub(crate) fn snapshot(&self) -> LockerStats {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LockerStats {
            held: read(&self.held),
            waiting: read(&self.waiting),
            obtained: read(&self.obtained),
            busy: read(&self.busy),
            timed_out: read(&self.timed_out),
            cancelled: read(&self.cancelled),
            failed: read(&self.failed),
            lost: read(&self.lost),
            renewals: read(&self.renewals),
            renewal_failures: read(&self.renewal_failures),
            backend_errors: read(&self.backend_errors),
        }
    }
}
