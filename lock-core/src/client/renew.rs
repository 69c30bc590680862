//! The watchdog: one task per [`Locker`](crate::Locker) renews every watched hold (a
//! watched guard and the guards reentered from it), many at a time.
//!
//! A watched hold is due a fraction of its ttl (its *period*) after the start of its
//! current validity: after the request that last granted or prolonged it was sent, or
//! earlier when a prolong by hand shortened it. Due times are rounded *down* onto a grid
//! of that period, anchored at the first watched hold of the locker: holds of the same
//! period come due at the same instants and go out together in one
//! [`LockBackend::prolongate_many`](crate::LockBackend::prolongate_many), one pipeline or
//! one statement however many they are. The price: a hold's first renewal comes early,
//! anywhere in its first period; after that each renews once a period, and a renewal is
//! never later than the period asks.
//!
//! A batch in flight never holds the lost signal back: while it waits for its answer, the
//! validity of each of its holds still runs out on time and fires `lost`. A hold whose
//! prolong fails is tried again alone, a tenth of its ttl later, until its validity runs
//! out; after a success it is back on the grid. A backend that panics fails the batch like
//! an error; a batch whose runtime ends under it puts its holds back in the queue, and the
//! next use of a watched guard, on any runtime, starts the task again.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::client::clock;
use crate::client::hold::{Hold, Ticket};
use crate::observe::{Event, LostCause, Telemetry};
use crate::{Error, ErrorKind, Operation, ProlongOutcome, ProlongRequest};

/// When each watched hold of one locker renews next.
#[derive(Debug, Default)]
pub(crate) struct Renewals {
    schedule: Mutex<Schedule>,
    /// Wakes the task when a hold comes due before everything it sleeps for.
    wake: Notify,
}

#[derive(Debug, Default)]
struct Schedule {
    /// By (when, a sequence number that keeps entries of one instant apart).
    queue: BTreeMap<(Instant, u64), Arc<Hold>>,
    seq: u64,
    /// Where every grid starts: the first watched hold's grant.
    epoch: Option<Instant>,
    /// The renewing task that runs, by number; it ends when the queue is empty. The task's
    /// runtime may end first (a test's runtime, a `block_on` that returns): its drop then
    /// clears this, and the next use of a watched guard starts a task on its own runtime.
    running: Option<u64>,
    tasks: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The shortest period: a ttl of a few milliseconds still renews, not spins.
const MIN_PERIOD: Duration = Duration::from_millis(1);

impl Renewals {
    /// Schedules the next renewal of `hold` one period after the start of its current
    /// validity (its end less its ttl), rounded down onto the grid, and starts the task if
    /// none runs. A prolong that shortened the validity brings the renewal forward with it.
    /// Does nothing for a hold that is over.
    pub(crate) fn schedule(self: &Arc<Self>, hold: &Arc<Hold>) {
        self.schedule_after(hold, None);
    }

    /// As [`Renewals::schedule`], but no sooner than `earliest`.
    fn schedule_after(self: &Arc<Self>, hold: &Arc<Hold>, earliest: Option<Instant>) {
        let Some(fraction) = hold.watchdog else {
            return;
        };
        let ttl = hold.ttl().as_duration();
        let period = ttl.mul_f64(fraction).max(MIN_PERIOD);
        let until = hold.until();
        let due = until.checked_sub(ttl - period.min(ttl)).unwrap_or(until);
        // After the rounding down, which can land before `earliest`.
        let not_before = earliest.map(|earliest| earliest.min(until));
        self.insert(hold, |epoch| {
            let epoch = *epoch.get_or_insert(due.checked_sub(period).unwrap_or(due));
            let at = on_grid(epoch, due, period).min(due);
            not_before.map_or(at, |not_before| at.max(not_before))
        });
    }

    /// Schedules a retry of `hold` at `at`, off the grid.
    fn retry(self: &Arc<Self>, hold: &Arc<Hold>, at: Instant) {
        self.insert(hold, |_| at);
    }

    fn insert(
        self: &Arc<Self>,
        hold: &Arc<Hold>,
        at: impl FnOnce(&mut Option<Instant>) -> Instant,
    ) {
        let start = {
            let mut schedule = lock(&self.schedule);
            // Under the schedule's lock: a release ends the hold first and then takes it
            // out under this lock, so either it sees this entry or this sees the end.
            if hold.is_over() {
                return;
            }
            let at = at(&mut schedule.epoch);
            let seq = schedule.seq;
            schedule.seq += 1;
            let first = schedule
                .queue
                .first_key_value()
                .is_none_or(|(k, _)| at < k.0);
            schedule.queue.insert((at, seq), Arc::clone(hold));
            if let Some(old) = lock(&hold.renew_slot).replace((at, seq)) {
                schedule.queue.remove(&old);
            }
            let start = self.claim_start(&mut schedule);
            if start.is_none() && first {
                self.wake.notify_one();
            }
            start
        };
        if let Some(start) = start {
            start.spawn();
        }
    }

    /// Marks a new task as running if none runs, something is queued and a runtime is
    /// there to run it; the caller spawns it once the schedule's lock is let go (a runtime
    /// that is shutting down drops a task at once, and its drop takes that lock).
    fn claim_start(self: &Arc<Self>, schedule: &mut Schedule) -> Option<Start> {
        if schedule.running.is_some() || schedule.queue.is_empty() {
            return None;
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let task = schedule.tasks;
        schedule.tasks += 1;
        schedule.running = Some(task);
        let running = Running {
            renewals: Arc::clone(self),
            task,
        };
        Some(Start { runtime, running })
    }

    /// Starts the task again if it ended with its runtime while holds still wait: called
    /// whenever a watched guard is used, on whatever runtime that is.
    pub(crate) fn ensure_running(self: &Arc<Self>) {
        let start = self.claim_start(&mut lock(&self.schedule));
        if let Some(start) = start {
            start.spawn();
        }
    }

    /// Takes a hold that is over out of the queue.
    pub(crate) fn remove(&self, hold: &Hold) {
        let mut schedule = lock(&self.schedule);
        if let Some(slot) = lock(&hold.renew_slot).take() {
            schedule.queue.remove(&slot);
        }
    }

    /// The holds due at `now`, and when the next one is; `None` (and the task's end)
    /// when nothing is left.
    fn take_due(&self, now: Instant) -> (Vec<Arc<Hold>>, Option<Instant>) {
        let mut schedule = lock(&self.schedule);
        let mut due = Vec::new();
        while let Some(entry) = schedule.queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let hold = entry.remove();
            *lock(&hold.renew_slot) = None;
            due.push(hold);
        }
        let next = schedule.queue.first_key_value().map(|(k, _)| k.0);
        if next.is_none() {
            schedule.running = None;
        }
        (due, next)
    }
}

/// The last instant of the grid `epoch + n * period` at or before `due` (never before
/// `epoch`).
fn on_grid(epoch: Instant, due: Instant, period: Duration) -> Instant {
    let since = due.saturating_duration_since(epoch).as_nanos();
    let step = period.as_nanos().max(1);
    let n = since / step;
    let offset = u64::try_from(n * step).unwrap_or(u64::MAX);
    epoch + Duration::from_nanos(offset)
}

/// A task to spawn, claimed under the schedule's lock.
struct Start {
    runtime: tokio::runtime::Handle,
    running: Running,
}

impl Start {
    fn spawn(self) {
        drop(self.runtime.spawn(run(self.running)));
    }
}

/// The renewing task's mark in the schedule; dropped with the task, however it ends.
struct Running {
    renewals: Arc<Renewals>,
    task: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut schedule = lock(&self.renewals.schedule);
        if schedule.running == Some(self.task) {
            schedule.running = None;
        }
    }
}

/// The task: sends each batch as it comes due, until no watched hold is left.
async fn run(running: Running) {
    let renewals = &running.renewals;
    loop {
        let (mut due, next) = renewals.take_due(clock::now());
        // As many locks per batch as the backend sends in one round trip, the batches
        // concurrent: each applies its answers when they come, so a slow answer holds back
        // no lock but those of its own round trip.
        let per_batch = due
            .first()
            .map_or(1, |hold| hold.backend.capabilities().prolong_batch.max(1));
        while !due.is_empty() {
            let rest = due.split_off(due.len().min(per_batch));
            let backend = due[0].backend.name();
            let span = tracing::debug_span!("lock.watchdog", backend, locks = due.len());
            let batch = Batch {
                renewals: Arc::clone(renewals),
                holds: due,
                done: false,
            };
            tokio::spawn(renew(batch).instrument(span));
            due = rest;
        }
        let Some(next) = next else { return };
        tokio::select! {
            _ = clock::sleep_until(next) => {}
            _ = renewals.wake.notified() => {}
        }
    }
}

/// The holds of one batch, out of the queue while it runs. A batch that never finishes
/// (its runtime ended under it) puts them back, due at once, so that the next task renews
/// them, or finds them expired and fires their lost signal.
struct Batch {
    renewals: Arc<Renewals>,
    holds: Vec<Arc<Hold>>,
    done: bool,
}

impl Drop for Batch {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let now = clock::now();
        for hold in &self.holds {
            self.renewals.retry(hold, now);
        }
    }
}

/// Prolongs one batch and schedules each hold's next renewal by its answer.
async fn renew(mut batch: Batch) {
    let now = clock::now();
    let mut tickets: Vec<Ticket> = Vec::with_capacity(batch.holds.len());
    for hold in &batch.holds {
        if hold.is_over() || hold.is_marked_lost() {
            continue;
        }
        if hold.until() <= now {
            hold.mark_lost(
                LostCause::Expired,
                "its validity ran out before the watchdog could prolong it",
            );
            continue;
        }
        tickets.push(hold.begin(hold.ttl()));
    }
    let renewals = Arc::clone(&batch.renewals);
    let Some(first) = tickets.first() else {
        batch.done = true;
        return;
    };
    let backend = Arc::clone(&first.hold().backend);
    let reqs: Vec<ProlongRequest<'_>> = tickets
        .iter()
        .map(|t| ProlongRequest {
            key: &t.hold().key,
            token: &t.hold().token,
            ttl: t.ttl,
        })
        .collect();
    let mut report = BatchReport::new(backend.name(), &tickets);
    // A backend that panics (a user's backend, a wrapper's bug) must not take the lost
    // signal of every lock of the batch with it: the panic is an error for each request.
    let call = std::panic::AssertUnwindSafe(backend.prolongate_many(&reqs)).catch_unwind();
    let answers = tokio::select! {
        answers = call => answers.unwrap_or_else(|panic| {
            let why = panic_message(&*panic);
            vec![Err(Error::new(ErrorKind::Protocol, backend.name(), Operation::Prolongate, format!("the backend panicked: {why}"))); reqs.len()]
        }),
        // Every hold of the batch is lost or over: nothing waits for the answer.
        () = expire_in_flight(&tickets) => {
            batch.done = true;
            report.send_all_failed();
            return;
        }
    };
    report.answered();
    drop(reqs);
    batch.done = true;
    let mut answers = answers.into_iter();
    let mut failed: Option<(usize, Error)> = None;
    let total = tickets.len();
    for ticket in tickets {
        let answer = answers.next().unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::Protocol,
                backend.name(),
                Operation::Prolongate,
                "prolongate_many gave fewer answers than it had requests",
            ))
        });
        let hold = Arc::clone(ticket.hold());
        let ttl = ticket.ttl;
        match answer {
            Ok(outcome) => {
                ticket.finish(Some(outcome));
                if outcome != ProlongOutcome::Lost && !hold.is_marked_lost() {
                    // A validity capped by a call still in flight (a prolong by hand that
                    // hangs) leaves the next renewal due at once, and renewing cannot lift
                    // the cap: the next one comes no sooner than a tenth of the ttl.
                    let pause = (ttl.as_duration() / 10).max(MIN_PERIOD);
                    renewals.schedule_after(&hold, Some(clock::now() + pause));
                }
            }
            Err(e) => {
                ticket.finish(None);
                report.failed(&hold, &e);
                if hold.is_over() || hold.is_marked_lost() {
                    continue;
                }
                let left = hold.until().saturating_duration_since(clock::now());
                if left.is_zero() {
                    hold.mark_lost(
                        LostCause::Expired,
                        &format!("the watchdog could not prolong it before it ran out: {e}"),
                    );
                    continue;
                }
                let pause = (ttl.as_duration() / 10).max(MIN_PERIOD).min(left);
                renewals.retry(&hold, clock::now() + pause);
                match &mut failed {
                    Some((n, _)) => *n += 1,
                    None => failed = Some((1, e)),
                }
            }
        }
    }
    report.send();
    if let Some((n, e)) = failed {
        tracing::warn!("watchdog could not prolong {n} of {total} locks, retrying each: {e}");
    }
}

/// A batch's [`Event::Renewal`], for each observer its locks report to (one, unless a
/// locker's clones were given different observers).
struct BatchReport {
    backend: &'static str,
    sent_at: Instant,
    latency: Duration,
    /// Per telemetry: its locks in the batch, and how many failed.
    to: Vec<(Telemetry, usize, usize)>,
}

impl BatchReport {
    fn new(backend: &'static str, tickets: &[Ticket]) -> Self {
        let mut to: Vec<(Telemetry, usize, usize)> = Vec::with_capacity(1);
        for ticket in tickets {
            let telemetry = &ticket.hold().telemetry;
            match to.iter_mut().find(|(t, ..)| t.same_as(telemetry)) {
                Some((_, locks, _)) => *locks += 1,
                None => to.push((telemetry.clone(), 1, 0)),
            }
        }
        BatchReport {
            backend,
            sent_at: Instant::now(),
            latency: Duration::ZERO,
            to,
        }
    }

    fn answered(&mut self) {
        self.latency = self.sent_at.elapsed();
    }

    fn failed(&mut self, hold: &Hold, e: &Error) {
        hold.telemetry.error(Some(&hold.key), e);
        if let Some((_, _, failed)) = self
            .to
            .iter_mut()
            .find(|(t, ..)| t.same_as(&hold.telemetry))
        {
            *failed += 1;
        }
    }

    /// No answer came before every lock of the batch was lost or over.
    fn send_all_failed(mut self) {
        self.answered();
        for (_, locks, failed) in &mut self.to {
            *failed = *locks;
        }
        self.send();
    }

    fn send(self) {
        for (telemetry, locks, failed) in self.to {
            telemetry.emit(Event::Renewal {
                backend: self.backend,
                locks,
                failed,
                latency: self.latency,
            });
        }
    }
}

/// What a panic carried, for the error that replaces it.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Fires the lost signal of each hold of a batch in flight as its validity runs out;
/// returns when the last one has (unless the batch's answer came first). Every hold whose
/// validity has ended is marked in one go, without awaiting between them: a backend that
/// blocks its thread between two polls must not stretch that into one hold per poll.
async fn expire_in_flight(tickets: &[Ticket]) {
    // Earliest validity end first; an entry is checked again when it comes up, since a
    // prolong by hand may have moved it meanwhile.
    let mut ends: BinaryHeap<Reverse<(Instant, usize)>> = tickets
        .iter()
        .enumerate()
        .map(|(i, t)| Reverse((t.hold().until(), i)))
        .collect();
    while let Some(&Reverse((until, i))) = ends.peek() {
        if until > clock::now() {
            clock::sleep_until(until).await;
            continue;
        }
        ends.pop();
        let hold = tickets[i].hold();
        let now_until = hold.until();
        if hold.is_over() {
            continue;
        }
        if now_until > clock::now() {
            ends.push(Reverse((now_until, i)));
        } else {
            hold.mark_lost(
                LostCause::Expired,
                "its validity ran out while a prolong was still in flight",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_round_down_onto_the_grid() {
        let epoch = clock::now();
        let p = Duration::from_millis(100);
        let at = |ms: u64| epoch + Duration::from_millis(ms);
        assert_eq!(on_grid(epoch, at(100), p), at(100));
        assert_eq!(on_grid(epoch, at(199), p), at(100));
        assert_eq!(on_grid(epoch, at(250), p), at(200));
        assert_eq!(on_grid(epoch, at(50), p), at(0));
        assert_eq!(on_grid(epoch, epoch, p), epoch);
    }
}
