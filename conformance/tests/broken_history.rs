//! The history checker must catch backends that every scripted case of the suite can miss:
//! each wrapper below breaks the contract only under concurrency, timing or faults, and
//! `histories_check_out` must fail on it, naming the rule it broke, while the memory
//! backend passes it (in `memory.rs`, with the rest of the suite).

mod broken_support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use broken_support::run;
use lock_conformance::history::{self, check, Rule, Workload};
use lock_conformance::{async_trait, Failure, Harness, Suite};
use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::{ObtainRequest, ProlongRequest, ReleaseRequest, ReleaseSubscription};
use lock_core::{
    Fencing, HolderInfo, Key, LockBackend, MemoryBackend, Mode, ObtainOutcome, ProlongOutcome,
    ReleaseOutcome, Result, Ttl,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// The server ends every lease 40 ms before the ttl it granted.
    EndsLeasesEarly,
    /// A release whose hold is gone deletes whatever holds the key now (a retried release
    /// that deletes a newer hold).
    StaleReleaseDeletesTheNewerHold,
    /// A semaphore obtain of two permits that races another obtain is written down as one
    /// permit: the key admits one permit past its capacity.
    AdmitsOneTooManyUnderARace,
    /// Fencing tokens start again from lower after the server lost its data.
    FencingRestartsAfterDataLoss,
    /// A prolong answers `Prolonged` without renewing: the holder's lost signal never fires
    /// though the server let the hold expire.
    ProlongNotApplied,
    /// A `Busy` names the key's previous holder, not the current one.
    BusyNamesThePreviousHolder,
    /// A release of a hold another client took over answers `Released`, not `Lost`.
    LostReleaseAnsweredReleased,
    /// An inspection of a key held by one client answers free.
    InspectMissesALoneHolder,
    /// Declares release notifications, but a release wakes nobody (waiters find the key
    /// free only when their fallback poll comes).
    ReleaseWakesNobody,
}

#[derive(Debug)]
struct Bent {
    inner: Arc<MemoryBackend>,
    bug: Bug,
    /// What data losses took off every fencing token.
    offset: Arc<AtomicU64>,
    /// Shared obtains in flight.
    racing: AtomicUsize,
    /// Per key, the holder before the current one, and the current one.
    holders: Mutex<HashMap<Key, (Option<HolderInfo>, HolderInfo)>>,
}

#[async_trait]
impl Layer for Bent {
    fn inner(&self) -> &dyn LockBackend {
        &*self.inner
    }

    async fn obtain(&self, mut req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let asked = req.ttl;
        match (self.bug, req.mode) {
            (Bug::EndsLeasesEarly, _) => {
                req.ttl = Ttl::from_millis(asked.as_millis().saturating_sub(40).max(1))?;
            }
            (Bug::AdmitsOneTooManyUnderARace, mode) => {
                // Counts the obtains in flight without a lock: a semaphore obtain of two
                // permits that races another obtain is written down as one permit.
                self.racing.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                let raced = self.racing.load(Ordering::SeqCst) > 1;
                if let Mode::Shared { capacity, weight } = mode {
                    if raced && capacity != Mode::UNBOUNDED && weight > 1 {
                        req = req.with_mode(Mode::Shared {
                            capacity,
                            weight: weight - 1,
                        });
                    }
                }
                let outcome = self.inner.obtain(req).await;
                self.racing.fetch_sub(1, Ordering::SeqCst);
                return outcome;
            }
            _ => {}
        }
        let outcome = self.inner.obtain(req).await?;
        Ok(match outcome {
            ObtainOutcome::Acquired { fencing, ttl } => {
                let mut holders = self.holders.lock().unwrap();
                let previous = holders.remove(req.key).map(|(_, now)| now);
                holders.insert(req.key.clone(), (previous, req.holder.clone()));
                let shown = fencing.0 - self.offset.load(Ordering::SeqCst);
                ObtainOutcome::Acquired {
                    fencing: Fencing(shown),
                    ttl: if self.bug == Bug::EndsLeasesEarly {
                        asked
                    } else {
                        ttl
                    },
                }
            }
            ObtainOutcome::Busy(mut busy) if self.bug == Bug::BusyNamesThePreviousHolder => {
                let holders = self.holders.lock().unwrap();
                if let Some((Some(previous), _)) = holders.get(req.key) {
                    busy.holder = Some(previous.clone());
                }
                ObtainOutcome::Busy(busy)
            }
            other => other,
        })
    }

    async fn prolongate(&self, mut req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        match self.bug {
            Bug::EndsLeasesEarly => {
                req.ttl = Ttl::from_millis(req.ttl.as_millis().saturating_sub(40).max(1))?;
            }
            Bug::ProlongNotApplied => {
                return Ok(match self.inner.inspect(req.key).await? {
                    lock_core::LockState::Free => ProlongOutcome::Lost,
                    _ => ProlongOutcome::Prolonged,
                });
            }
            _ => {}
        }
        self.inner.prolongate(req).await
    }

    async fn inspect(&self, key: &Key) -> Result<lock_core::LockState> {
        let state = self.inner.inspect(key).await?;
        Ok(match state {
            lock_core::LockState::Held { holds: 1, .. }
                if self.bug == Bug::InspectMissesALoneHolder =>
            {
                lock_core::LockState::Free
            }
            other => other,
        })
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        if self.bug == Bug::ReleaseWakesNobody {
            return Ok(None);
        }
        self.inner.subscribe(key).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        let outcome = self.inner.release(req).await?;
        if self.bug == Bug::StaleReleaseDeletesTheNewerHold && outcome == ReleaseOutcome::Lost {
            let _ = self.inner.force_release(req.key).await?;
        }
        if self.bug == Bug::LostReleaseAnsweredReleased && outcome == ReleaseOutcome::Lost {
            return Ok(ReleaseOutcome::Released);
        }
        Ok(outcome)
    }
}

/// Bent backends over memory; a data loss empties the memory backend and, for
/// `FencingRestartsAfterDataLoss`, takes an hour of microseconds off every later token.
struct BentHarness(Bug, Mutex<Vec<(Arc<MemoryBackend>, Arc<AtomicU64>)>>);

#[async_trait]
impl Harness for BentHarness {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        let inner = Arc::new(MemoryBackend::new());
        let offset = Arc::new(AtomicU64::new(0));
        self.1
            .lock()
            .unwrap()
            .push((Arc::clone(&inner), Arc::clone(&offset)));
        Arc::new(Layered(Bent {
            inner,
            bug: self.0,
            offset,
            racing: AtomicUsize::new(0),
            holders: Mutex::default(),
        }))
    }

    async fn lose_data(&self, _: &Arc<dyn LockBackend>) -> bool {
        for (inner, offset) in self.1.lock().unwrap().iter() {
            inner.simulate_data_loss();
            if self.0 == Bug::FencingRestartsAfterDataLoss {
                offset.fetch_add(3_600_000_000, Ordering::SeqCst);
            }
        }
        true
    }
}

/// Seeds the workload runs from, each in turn until one catches the bug: the clients'
/// timing differs from run to run, so a run can miss a bug that needs a race; three runs
/// of six seconds in a row have not missed one here.
const SEEDS: [u64; 3] = [1, 2, 3];

/// Records the workload's history on a runtime of its own.
fn record(suite: &Suite, workload: Workload) -> history::History {
    let mut recorded = None;
    run(async {
        recorded = Some(history::run(suite, workload).await?);
        Ok(())
    })
    .unwrap_or_else(|Failure(e)| panic!("the workload did not run: {e}"));
    recorded.expect("a history")
}

/// `bug` must break `rule` within [`SEEDS`]'s runs.
fn caught(bug: Bug, rule: Rule) {
    caught_as(bug, &[rule]);
}

/// `bug` must break one of `rules` within [`SEEDS`]'s runs, whichever it breaks first.
fn caught_as(bug: Bug, rules: &[Rule]) {
    for seed in SEEDS {
        let suite = Suite::new("bent", BentHarness(bug, Mutex::default())).with_seed(seed);
        let workload = Workload {
            duration: Duration::from_secs(6),
            ..Workload::from_env(&suite)
        };
        let recorded = record(&suite, workload);
        match check(&recorded) {
            Ok(verdict) => println!("{bug:?}, seed {seed}: missed ({verdict:?})"),
            Err(violation) => {
                let page = history::write_timeline("bent", &recorded, &violation)
                    .expect("the timeline written");
                assert!(
                    rules.contains(&violation.rule),
                    "{bug:?} broke another rule than expected ({rules:?}):\n{violation}\ntimeline: {}",
                    page.display()
                );
                println!(
                    "{bug:?} caught with seed {seed}:\n{violation}\ntimeline: {}",
                    page.display()
                );
                return;
            }
        }
    }
    panic!(
        "the history checker did not catch {bug:?} in {} runs",
        SEEDS.len()
    );
}

#[test]
fn leases_ended_early_are_caught() {
    // Two holders at once: on the mutex key as exclusion, on the semaphore as capacity,
    // whichever the run meets first.
    caught_as(Bug::EndsLeasesEarly, &[Rule::Exclusion, Rule::Capacity]);
}

#[test]
fn a_stale_release_deleting_the_newer_hold_is_caught() {
    caught(Bug::StaleReleaseDeletesTheNewerHold, Rule::Exclusion);
}

#[test]
fn one_share_too_many_under_a_race_is_caught() {
    caught(Bug::AdmitsOneTooManyUnderARace, Rule::Capacity);
}

#[test]
fn fencing_tokens_restarting_after_data_loss_are_caught() {
    caught(Bug::FencingRestartsAfterDataLoss, Rule::FencingOrder);
}

#[test]
fn a_prolong_that_renews_nothing_is_caught() {
    caught(Bug::ProlongNotApplied, Rule::Exclusion);
}

#[test]
fn a_busy_naming_the_previous_holder_is_caught() {
    caught(Bug::BusyNamesThePreviousHolder, Rule::BusyNamesAHolder);
}

#[test]
fn a_release_that_wakes_nobody_is_caught() {
    caught(Bug::ReleaseWakesNobody, Rule::Progress);
}

#[test]
fn a_lost_release_answered_released_is_caught() {
    caught(
        Bug::LostReleaseAnsweredReleased,
        Rule::AnsweredForAHoldThatWasTaken,
    );
}

#[test]
fn an_inspection_that_misses_the_holder_is_caught() {
    caught(Bug::InspectMissesALoneHolder, Rule::InspectSeesTheHolds);
}
