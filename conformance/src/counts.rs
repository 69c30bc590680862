//! An observer that counts each kind of event, for the cases that check what a locker's
//! observer hears.

use std::sync::atomic::{AtomicU64, Ordering};

use lock_core::observe::{Event, HoldEnd, LostCause, Observer, ObtainEnd};
use lock_core::{ErrorKind, Operation};

/// Counts each kind of event the cases check, one counter each (named after it); `other`
/// counts whatever none of them expects.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) started: AtomicU64,
    pub(crate) obtained: AtomicU64,
    pub(crate) busy: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) holds: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) ended_lost: AtomicU64,
    pub(crate) taken: AtomicU64,
    /// Losses because the validity ran out.
    pub(crate) expired: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) renewed: AtomicU64,
    pub(crate) obtain_errors: AtomicU64,
    pub(crate) other: AtomicU64,
}

impl Observer for Counts {
    fn event(&self, event: &Event<'_>) {
        let counter = match *event {
            Event::ObtainStarted { .. } => &self.started,
            Event::ObtainEnded { end, .. } => match end {
                ObtainEnd::Obtained => &self.obtained,
                ObtainEnd::Busy => &self.busy,
                ObtainEnd::TimedOut => &self.timed_out,
                ObtainEnd::Failed(_) => &self.failed,
                _ => &self.other,
            },
            Event::HoldStarted { .. } => &self.holds,
            Event::HoldEnded { end, .. } => match end {
                HoldEnd::Released => &self.released,
                HoldEnd::Lost => &self.ended_lost,
                _ => &self.other,
            },
            Event::Lost {
                cause: LostCause::Taken,
                ..
            } => &self.taken,
            Event::Lost {
                cause: LostCause::Expired,
                ..
            } => &self.expired,
            Event::Renewal { locks, failed, .. } => {
                self.renewed.fetch_add(locks as u64, Ordering::SeqCst);
                if failed > 0 {
                    self.other.fetch_add(1, Ordering::SeqCst);
                }
                &self.batches
            }
            Event::BackendError {
                kind: ErrorKind::Unavailable,
                operation: Operation::Obtain,
                ..
            } => &self.obtain_errors,
            _ => &self.other,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

pub(crate) fn read(c: &AtomicU64) -> u64 {
    c.load(Ordering::SeqCst)
}
