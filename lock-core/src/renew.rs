//! The watchdog: one task per [`Locker`](crate::Locker) renews every watched guard, many
//! at a time.
//!
//! A watched guard is due a fraction of its ttl (its *period*) after the request that last
//! granted or prolonged it was sent. Due times are rounded *down* onto a grid of that
//! period, anchored at the first watched guard of the locker: guards of the same period
//! come due at the same instants and go out together in one
//! [`LockBackend::prolongate_many`](crate::LockBackend::prolongate_many), one pipeline or
//! one statement however many they are. The price: a guard's first renewal comes early,
//! anywhere in its first period; after that each renews once a period, and a renewal is
//! never later than the period asks.
//!
//! A batch in flight never holds the lost signal back: while it waits for its answer, the
//! validity of each of its guards still runs out on time and fires `lost`. A guard whose
//! prolong fails is tried again alone, a tenth of its ttl later, until its validity runs
//! out; after a success it is back on the grid.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::guard::{Registry, Shared};
use crate::{Error, ErrorKind, Operation, ProlongOutcome, ProlongRequest, Ttl};

/// When each watched guard of one locker renews next.
#[derive(Debug, Default)]
pub(crate) struct Renewals {
    schedule: Mutex<Schedule>,
    /// Wakes the task when a guard comes due before everything it sleeps for.
    wake: Notify,
}

#[derive(Debug, Default)]
struct Schedule {
    /// By (when, a sequence number that keeps entries of one instant apart).
    queue: BTreeMap<(Instant, u64), Arc<Shared>>,
    seq: u64,
    /// Where every grid starts: the first watched guard's grant.
    epoch: Option<Instant>,
    /// The renewing task that runs, by number; it ends when the queue is empty. The task's
    /// runtime may end first (a test's runtime, a `block_on` that returns): its drop then
    /// clears this, and the next guard starts a task on its own runtime.
    running: Option<u64>,
    tasks: u64,
}

/// Where a guard sits in the queue, kept in the guard so that its release can take it out.
pub(crate) type Slot = Option<(Instant, u64)>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The shortest period: a ttl of a few milliseconds still renews, not spins.
const MIN_PERIOD: Duration = Duration::from_millis(1);

impl Renewals {
    /// Schedules the next renewal of `shared`, one period after `from` (when the request
    /// that last renewed it was sent) rounded down onto the grid, and starts the task if
    /// none runs. Does nothing for a guard given back meanwhile.
    pub(crate) fn schedule(registry: &Arc<Registry>, shared: &Arc<Shared>, from: Instant) {
        let Some(fraction) = shared.watchdog else {
            return;
        };
        let period = shared.ttl().as_duration().mul_f64(fraction).max(MIN_PERIOD);
        Self::insert(registry, shared, |epoch| {
            let epoch = *epoch.get_or_insert(from);
            on_grid(epoch, from + period, period)
        });
    }

    /// Schedules a retry of `shared` at `at`, off the grid.
    fn retry(registry: &Arc<Registry>, shared: &Arc<Shared>, at: Instant) {
        Self::insert(registry, shared, |_| at);
    }

    fn insert(
        registry: &Arc<Registry>,
        shared: &Arc<Shared>,
        at: impl FnOnce(&mut Option<Instant>) -> Instant,
    ) {
        let this = &registry.renewals;
        let mut schedule = lock(&this.schedule);
        // Under the schedule's lock: a release marks the guard first and then takes it out
        // under this lock, so either it sees this entry or this sees the mark.
        if shared.is_given_back() {
            return;
        }
        let at = at(&mut schedule.epoch);
        let seq = schedule.seq;
        schedule.seq += 1;
        let first = schedule
            .queue
            .first_key_value()
            .is_none_or(|(k, _)| at < k.0);
        schedule.queue.insert((at, seq), Arc::clone(shared));
        if let Some(old) = lock(&shared.renew_slot).replace((at, seq)) {
            schedule.queue.remove(&old);
        }
        match schedule.running {
            None => {
                let task = schedule.tasks;
                schedule.tasks += 1;
                schedule.running = Some(task);
                let running = Running {
                    registry: Arc::clone(registry),
                    task,
                };
                tokio::spawn(run(running));
            }
            Some(_) if first => this.wake.notify_one(),
            Some(_) => {}
        }
    }

    /// Takes a given-back guard out of the queue.
    pub(crate) fn remove(&self, shared: &Shared) {
        let mut schedule = lock(&self.schedule);
        if let Some(slot) = lock(&shared.renew_slot).take() {
            schedule.queue.remove(&slot);
        }
    }

    /// The guards due at `now`, and when the next one is; `None` (and the task's end)
    /// when nothing is left.
    fn take_due(&self, now: Instant) -> (Vec<Arc<Shared>>, Option<Instant>) {
        let mut schedule = lock(&self.schedule);
        let mut due = Vec::new();
        while let Some(entry) = schedule.queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let shared = entry.remove();
            *lock(&shared.renew_slot) = None;
            due.push(shared);
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

/// The renewing task's hold on the registry; dropped with the task, however it ends.
struct Running {
    registry: Arc<Registry>,
    task: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut schedule = lock(&self.registry.renewals.schedule);
        if schedule.running == Some(self.task) {
            schedule.running = None;
        }
    }
}

/// The task: sends each batch as it comes due, until no watched guard is left.
async fn run(running: Running) {
    let registry = &running.registry;
    let renewals = &registry.renewals;
    loop {
        let (due, next) = renewals.take_due(Instant::now());
        if !due.is_empty() {
            let backend = due[0].backend.name();
            let span = tracing::debug_span!("lock.watchdog", backend, locks = due.len());
            tokio::spawn(renew(Arc::clone(registry), due).instrument(span));
        }
        let Some(next) = next else { return };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = renewals.wake.notified() => {}
        }
    }
}

/// Prolongs one batch and schedules each guard's next renewal by its answer.
async fn renew(registry: Arc<Registry>, due: Vec<Arc<Shared>>) {
    let now = Instant::now();
    let mut batch: Vec<(Arc<Shared>, Ttl)> = Vec::with_capacity(due.len());
    for shared in due {
        if shared.is_given_back() || shared.is_marked_lost() {
            continue;
        }
        if shared.until() <= now {
            shared.mark_lost("its validity ran out before the watchdog could prolong it");
            continue;
        }
        let ttl = shared.ttl();
        batch.push((shared, ttl));
    }
    let Some((first, _)) = batch.first() else {
        return;
    };
    let backend = Arc::clone(&first.backend);
    let reqs: Vec<ProlongRequest<'_>> = batch
        .iter()
        .map(|(s, ttl)| ProlongRequest {
            key: &s.key,
            token: &s.token,
            ttl: *ttl,
        })
        .collect();
    let sent_at = Instant::now();
    let answers = tokio::select! {
        answers = backend.prolongate_many(&reqs) => answers,
        // Every guard of the batch is lost or given back: nothing waits for the answer.
        () = expire_in_flight(&batch) => return,
    };
    drop(reqs);
    let mut answers = answers.into_iter();
    let mut failed: Option<(usize, Error)> = None;
    for (shared, ttl) in &batch {
        let answer = answers.next().unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::Protocol,
                backend.name(),
                Operation::Prolongate,
                "prolongate_many gave fewer answers than it had requests",
            ))
        });
        // Lost while in flight (its validity ran out first) or given back: done with it.
        if shared.is_given_back() || shared.is_marked_lost() {
            continue;
        }
        match answer {
            Ok(outcome) => {
                shared.apply(outcome, sent_at, *ttl);
                if outcome != ProlongOutcome::Lost {
                    Renewals::schedule(&registry, shared, sent_at);
                }
            }
            Err(e) => {
                let left = shared.until().saturating_duration_since(Instant::now());
                if left.is_zero() {
                    shared.mark_lost(&format!(
                        "the watchdog could not prolong it before it ran out: {e}"
                    ));
                    continue;
                }
                let pause = (ttl.as_duration() / 10).max(MIN_PERIOD).min(left);
                Renewals::retry(&registry, shared, Instant::now() + pause);
                match &mut failed {
                    Some((n, _)) => *n += 1,
                    None => failed = Some((1, e)),
                }
            }
        }
    }
    if let Some((n, e)) = failed {
        tracing::warn!(
            "watchdog could not prolong {n} of {} locks, retrying each: {e}",
            batch.len()
        );
    }
}

/// Fires the lost signal of each guard of a batch in flight as its validity runs out;
/// returns when the last one has (unless the batch's answer came first). Every guard whose
/// validity has ended is marked in one go, without awaiting between them: a backend that
/// blocks its thread between two polls must not stretch that into one guard per poll.
async fn expire_in_flight(batch: &[(Arc<Shared>, Ttl)]) {
    // Earliest validity end first; an entry is checked again when it comes up, since a
    // prolong by hand may have moved it meanwhile.
    let mut ends: BinaryHeap<Reverse<(Instant, usize)>> = batch
        .iter()
        .enumerate()
        .map(|(i, (shared, _))| Reverse((shared.until(), i)))
        .collect();
    while let Some(&Reverse((until, i))) = ends.peek() {
        if until > Instant::now() {
            tokio::time::sleep_until(until).await;
            continue;
        }
        ends.pop();
        let shared = &batch[i].0;
        let now_until = shared.until();
        if now_until > Instant::now() {
            ends.push(Reverse((now_until, i)));
        } else if !shared.is_given_back() {
            shared.mark_lost("its validity ran out while a prolong was still in flight");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_round_down_onto_the_grid() {
        let epoch = Instant::now();
        let p = Duration::from_millis(100);
        let at = |ms: u64| epoch + Duration::from_millis(ms);
        assert_eq!(on_grid(epoch, at(100), p), at(100));
        assert_eq!(on_grid(epoch, at(199), p), at(100));
        assert_eq!(on_grid(epoch, at(250), p), at(200));
        assert_eq!(on_grid(epoch, at(50), p), at(0));
        assert_eq!(on_grid(epoch, epoch, p), epoch);
    }
}
