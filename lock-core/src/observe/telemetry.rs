//! The client layer's side of observation: every event counted in the locker's
//! [`Counters`], then handed to its observer, if it has one.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::stats::Counters;
use super::{Event, LockerStats, Observer, ObtainEnd};
use crate::{Error, Key, Mode, Operation};

/// A locker's counters (shared by its clones) and observer.
#[derive(Clone, Default)]
pub(crate) struct Telemetry {
    counters: Arc<Counters>,
    observer: Option<Arc<dyn Observer>>,
}

impl Telemetry {
    /// The same counters, events also handed to `observer`.
    pub(crate) fn with_observer(&self, observer: Arc<dyn Observer>) -> Telemetry {
        Telemetry {
            counters: Arc::clone(&self.counters),
            observer: Some(observer),
        }
    }

    /// Whether both count into the same counters and report to the same observer.
    pub(crate) fn same_as(&self, other: &Telemetry) -> bool {
        Arc::ptr_eq(&self.counters, &other.counters)
            && match (&self.observer, &other.observer) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }

    /// The moment now, if an observer will want durations; without one, no clock is read
    /// (the counters need none, and a cycle on a fast backend is a few microseconds).
    /// Durations are on tokio's monotonic clock.
    pub(crate) fn stopwatch(&self) -> Option<Instant> {
        self.observer.is_some().then(Instant::now)
    }

    pub(crate) fn stats(&self) -> LockerStats {
        self.counters.snapshot()
    }

    /// Counts `event` and hands it to the observer.
    pub(crate) fn emit(&self, event: Event<'_>) {
        let c = &*self.counters;
        match event {
            Event::ObtainStarted { .. } => Counters::add(&c.waiting, 1),
            Event::ObtainEnded { end, .. } => {
                Counters::down(&c.waiting);
                Counters::add(
                    match end {
                        ObtainEnd::Obtained => &c.obtained,
                        ObtainEnd::Busy => &c.busy,
                        ObtainEnd::TimedOut => &c.timed_out,
                        ObtainEnd::Cancelled => &c.cancelled,
                        ObtainEnd::Failed(_) => &c.failed,
                    },
                    1,
                );
            }
            Event::HoldStarted { .. } => Counters::add(&c.held, 1),
            Event::HoldEnded { .. } => Counters::down(&c.held),
            Event::Lost { .. } => Counters::add(&c.lost, 1),
            Event::Renewal { locks, failed, .. } => {
                Counters::add(&c.renewals, locks as u64);
                Counters::add(&c.renewal_failures, failed as u64);
            }
            Event::BackendError { .. } => Counters::add(&c.backend_errors, 1),
        }
        let Some(observer) = &self.observer else {
            return;
        };
        // An observer's bug must not take a lock's bookkeeping (a guard's drop, the
        // watchdog's task) down with it.
        if catch_unwind(AssertUnwindSafe(|| observer.event(&event))).is_err() {
            tracing::warn!(?event, "a lock observer panicked; the event is lost to it");
        }
    }

    /// A failed backend call.
    pub(crate) fn error(&self, key: Option<&Key>, e: &Error) {
        self.emit(Event::BackendError {
            backend: e.backend(),
            key,
            kind: e.kind(),
            operation: e.operation(),
        });
    }

    /// A failed backend call that is not an input refused before any I/O.
    pub(crate) fn call_failed(&self, key: &Key, e: &Error) {
        if e.operation() != Operation::Validate {
            self.error(Some(key), e);
        }
    }
}

/// One obtain from its start to its end: [`Event::ObtainStarted`] when made,
/// [`Event::ObtainEnded`] when ended, or, dropped before that, as cancelled.
pub(crate) struct ObtainWatch<'a> {
    telemetry: &'a Telemetry,
    backend: &'static str,
    key: &'a Key,
    mode: Mode,
    started: Option<Instant>,
    /// Calls to the backend's `obtain` answered so far.
    pub(crate) attempts: u32,
    ended: bool,
}

impl<'a> ObtainWatch<'a> {
    pub(crate) fn start(
        telemetry: &'a Telemetry,
        backend: &'static str,
        key: &'a Key,
        mode: Mode,
    ) -> Self {
        telemetry.emit(Event::ObtainStarted { backend, key, mode });
        ObtainWatch {
            telemetry,
            backend,
            key,
            mode,
            started: telemetry.stopwatch(),
            attempts: 0,
            ended: false,
        }
    }

    pub(crate) fn end(mut self, end: ObtainEnd) {
        self.finish(end);
    }

    fn finish(&mut self, end: ObtainEnd) {
        self.ended = true;
        self.telemetry.emit(Event::ObtainEnded {
            backend: self.backend,
            key: self.key,
            mode: self.mode,
            end,
            waited: self.started.map_or(Duration::ZERO, |t| t.elapsed()),
            attempts: self.attempts,
        });
    }
}

impl Drop for ObtainWatch<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.finish(ObtainEnd::Cancelled);
        }
    }
}
