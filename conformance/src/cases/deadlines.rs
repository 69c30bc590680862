//! One deadline per call, however many others contend for the key: a backend that retries
//! after a conflict (an optimistic transaction, a `WATCH`, a compare on revisions) retries
//! within the call's deadline, never with a fresh one per round.

use std::time::Duration;

use lock_core::{Mode, ObtainOutcome, Result};
use tokio::time::Instant;

use super::faults::faulty;
use crate::harness::{ms, Owner};
use crate::{ensure, CaseResult, Failure, Suite};

/// How far past its deadline a call may answer on a loaded 2-core machine: the scheduler's
/// delay in waking the task, and the last reply in flight when the deadline fell.
pub const DEADLINE_MARGIN: Duration = Duration::from_millis(500);

/// How many tasks hammer the key at once.
const TASKS: usize = 8;

/// How long they hammer it.
const HAMMER: Duration = Duration::from_millis(3_000);

/// Eight tasks hammer one key (shares of one semaphore on a backend that keeps shared holds,
/// the mutex otherwise: every admission, renewal and release writes the same record or the
/// same range of keys) through the harness's backend with a short deadline
/// ([`Faulty::deadline`](crate::Faulty)) and replies slowed by a tenth of it, so that
/// decisions overlap and conflict. Every call answers, or fails, within its deadline plus
/// [`DEADLINE_MARGIN`].
pub async fn calls_under_contention_end_by_their_deadline(suite: &Suite) -> CaseResult {
    let case = "calls_under_contention_end_by_their_deadline";
    let Some(f) = faulty(suite, case).await? else {
        return Ok(());
    };
    f.faults.delay_replies(f.deadline / 10);
    let shared = f.backend.capabilities().shared;
    let until = Instant::now() + HAMMER;
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let owner = Owner::new(&f.backend, "contended", &format!("task {i}"));
            tokio::spawn(hammer(owner, shared, until))
        })
        .collect();
    let mut slowest = (Duration::ZERO, String::new());
    let mut calls = 0;
    for task in tasks {
        let (n, took, what) = task
            .await
            .map_err(|e| Failure(format!("a hammering task panicked: {e}")))?;
        calls += n;
        if took > slowest.0 {
            slowest = (took, what);
        }
    }
    f.faults.heal();
    let bound = f.deadline + DEADLINE_MARGIN;
    ensure!(
        slowest.0 <= bound,
        "{} took {:?} under contention, past its deadline of {:?} (+{DEADLINE_MARGIN:?}); \
         {calls} calls in all: a call's retries after conflicts must end by its one deadline",
        slowest.1,
        slowest.0,
        f.deadline
    );
    ensure!(calls >= TASKS, "only {calls} calls were made");
    Ok(())
}

/// Obtains, prolongs and releases until `until`; the number of calls, and the slowest with
/// what it was.
async fn hammer(owner: Owner, shared: bool, until: Instant) -> (usize, Duration, String) {
    let mode = if shared {
        Mode::Shared {
            capacity: 4,
            weight: 1,
        }
    } else {
        Mode::Exclusive
    };
    let mut slowest = (Duration::ZERO, String::new());
    let mut calls = 0;
    let mut timed = |what: &str, started: Instant| {
        calls += 1;
        let took = started.elapsed();
        if took > slowest.0 {
            slowest = (took, what.to_owned());
        }
    };
    while Instant::now() < until {
        let started = Instant::now();
        let got: Result<ObtainOutcome> = owner.obtain_as(ms(5_000), mode, false).await;
        timed("an obtain", started);
        if !matches!(got, Ok(ObtainOutcome::Acquired { .. })) {
            // Busy or failed (a deadline may pass here): only the time counts.
            tokio::time::sleep(ms(fastrand::u64(0..20))).await;
            continue;
        }
        // Held a moment, so that the other tasks find the key full (or held) and contend.
        tokio::time::sleep(ms(fastrand::u64(1..10))).await;
        let started = Instant::now();
        let _ = owner.prolong(ms(5_000)).await;
        timed("a prolong", started);
        let started = Instant::now();
        let _ = owner.release(None).await;
        timed("a release", started);
    }
    (calls, slowest.0, slowest.1)
}
