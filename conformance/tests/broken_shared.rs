//! The suite must catch a backend that breaks one rule of the contract's "Shared holds":
//! each bug below breaks exactly one, in a backend made of lock-core's own rules (as the
//! memory backend is) with that one decision bent, and the case named after the rule must
//! fail on it. Every bug here passed the whole suite before its case was written.

mod broken_support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use broken_support::{run, Case};
use lock_conformance::{async_trait, cases, Harness, Suite};
use lock_core::backend::rules::{self, Clock, Decision, Record, State, Wake};
use lock_core::backend::{
    Capabilities, Grace, ObtainRequest, ProlongRequest, ReleaseRequest, ReleaseSubscription, Token,
    Waiters,
};
use lock_core::{
    HolderInfo, Key, LockBackend, LockState, ObtainOutcome, ProlongOutcome, ReleaseOutcome, Result,
};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// None: the rules as they are (the cases must pass on it).
    None,
    /// A shared request that would fill the semaphore exactly is `Busy(Full)`.
    RefusesTheLastPermit,
    /// A shared request one permit past the capacity is admitted.
    AdmitsOnePastTheCapacity,
    /// Expired shares that fit beside a new one are kept newest first.
    KeepsNewestExpiredShares,
    /// A waiting writer's marker keeps the end its first busy attempt gave it.
    MarkerFromTheFirstAttempt,
    /// A waiting writer's marker never lapses, its writer dead or not.
    MarkerNeverLapses,
    /// A downgrade wakes one waiter.
    DowngradeWakesOne,
    /// A late release of one share frees the whole key.
    LateReleaseFreesEveryShare,
    /// A share's prolong renews every share of the key.
    ProlongRenewsEveryShare,
    /// A release with `delay_after` starts the cooldown even when live shares remain.
    CooldownBesideLiveShares,
    /// A token whose share expired (still in the record) is `Reacquired`.
    ExpiredShareReacquired,
    /// A mode change whose hold is gone is granted afresh, as an obtain without
    /// `change` would be.
    ChangeOfAGoneHoldGranted,
    /// A request with another capacity takes the key over once its shares all expired,
    /// though they are still remembered within their grace.
    CapacityForgottenWhenSharesExpire,
    /// A `Busy` on a shared key names its oldest hold, whatever the request.
    BusyNamesTheOldestHold,
    /// `inspect` shows a writer's marker left alone on a key with no holds.
    InspectShowsALoneMarker,
    /// A released key keeps its free record for ever (to remember its fencing token).
    KeepsFreeRecords,
}

type Rec = Record<Token, HolderInfo>;

/// Lock-core's rules over a map, as the memory backend keeps them, with `bug` bent in.
#[derive(Debug)]
struct Bent {
    bug: Bug,
    records: Mutex<HashMap<Key, Rec>>,
    fencing: Mutex<u64>,
    epoch: Instant,
    waiters: Waiters,
}

impl Bent {
    fn clock(&self) -> Clock {
        Clock::nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    fn apply<O>(
        &self,
        key: &Key,
        records: &mut HashMap<Key, Rec>,
        d: Decision<O, Token, HolderInfo>,
    ) -> O {
        if let Some(record) = d.write {
            let mut fencing = self.fencing.lock().unwrap();
            *fencing = (*fencing).max(record.fencing);
            // A free record is dropped, as the memory backend does (the counter keeps
            // fencing growing).
            let free = record.state == State::Free && record.writer.is_none();
            if free && self.bug != Bug::KeepsFreeRecords {
                records.remove(key);
            } else {
                records.insert(key.clone(), record);
            }
        }
        self.waiters.wake(key.as_str(), d.wake);
        d.outcome
    }
}

/// The live shares' weights, and the capacity, of a shared record.
fn used(record: Option<&Rec>, clock: Clock) -> Option<(u64, u32)> {
    match record.map(|r| &r.state) {
        Some(State::Shared(s)) => Some((
            s.holds
                .iter()
                .filter(|sh| sh.hold.expires > clock.now())
                .map(|sh| u64::from(sh.weight))
                .sum(),
            s.capacity,
        )),
        _ => None,
    }
}

#[async_trait]
impl LockBackend for Bent {
    fn name(&self) -> &'static str {
        "bent"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::none().release_notification(true).shared(true)
    }
    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let clock = self.clock();
        let mut records = self.records.lock().unwrap();
        let mut record = records.get(req.key).cloned();
        let weight = match req.mode {
            lock_core::Mode::Shared { weight, .. } => Some(u64::from(weight)),
            lock_core::Mode::Exclusive => None,
        };
        if let (Some(weight), Some((used, capacity))) = (weight, used(record.as_ref(), clock)) {
            let fills = used + weight == u64::from(capacity);
            let one_past = used + weight == u64::from(capacity) + 1;
            if (self.bug == Bug::RefusesTheLastPermit && fills)
                || (self.bug == Bug::AdmitsOnePastTheCapacity && one_past)
            {
                if let Some(State::Shared(s)) = record.as_mut().map(|r| &mut r.state) {
                    // Decide as if the capacity were one smaller or larger, and keep it.
                    let stored = s.capacity;
                    s.capacity = match self.bug {
                        Bug::RefusesTheLastPermit => stored - 1,
                        _ => stored + 1,
                    };
                    let req = req.with_mode(lock_core::Mode::Shared {
                        capacity: s.capacity,
                        weight: weight as u32,
                    });
                    let d = self.decide_obtain(record.as_ref(), clock, &req);
                    let mut d = d?;
                    if let Some(State::Shared(w)) = d.write.as_mut().map(|r| &mut r.state) {
                        w.capacity = stored;
                    }
                    return Ok(self.apply(req.key, &mut records, d));
                }
            }
        }
        if let Some(rec) = record.as_mut() {
            match (self.bug, &mut rec.state) {
                (Bug::KeepsNewestExpiredShares, State::Shared(s)) if weight.is_some() => {
                    // The rules keep expired shares in record order: reverse the expired ones.
                    let now = clock.now();
                    let expired: Vec<usize> = (0..s.holds.len())
                        .filter(|&i| s.holds[i].hold.expires <= now)
                        .collect();
                    let reversed: Vec<_> =
                        expired.iter().rev().map(|&i| s.holds[i].clone()).collect();
                    for (slot, share) in expired.iter().zip(reversed) {
                        s.holds[*slot] = share;
                    }
                }
                (Bug::ExpiredShareReacquired, State::Shared(s)) => {
                    let now = clock.now();
                    for sh in &mut s.holds {
                        if sh.hold.token == *req.token
                            && sh.hold.expires <= now
                            && sh.hold.forget > now
                        {
                            sh.hold.expires = now + 1;
                        }
                    }
                }
                _ => {}
            }
        }
        if let (Bug::CapacityForgottenWhenSharesExpire, lock_core::Mode::Shared { capacity, .. }) =
            (self.bug, req.mode)
        {
            if let Some(State::Shared(s)) = record.as_mut().map(|r| &mut r.state) {
                if s.holds.iter().all(|sh| sh.hold.expires <= clock.now()) {
                    s.capacity = capacity;
                }
            }
        }
        let before = record.clone();
        let mut d = self.decide_obtain(record.as_ref(), clock, &req)?;
        if let (Bug::BusyNamesTheOldestHold, ObtainOutcome::Busy(busy)) = (self.bug, &mut d.outcome)
        {
            if let Some(State::Shared(s)) = before.as_ref().map(|r| &r.state) {
                if let Some(oldest) = s.holds.iter().find(|sh| sh.hold.expires > clock.now()) {
                    busy.holder = Some(oldest.hold.holder.clone());
                    busy.remaining =
                        std::time::Duration::from_nanos(oldest.hold.expires - clock.now());
                }
            }
        }
        let downgrade = weight.is_some()
            && matches!(before.as_ref().map(|r| &r.state), Some(State::Held(h)) if h.token == *req.token);
        if self.bug == Bug::DowngradeWakesOne && downgrade && d.wake == Wake::All {
            d.wake = Wake::One;
        }
        if self.bug == Bug::MarkerNeverLapses {
            if let Some(w) = d.write.as_mut().and_then(|r| r.writer.as_mut()) {
                w.until = u64::MAX;
            }
        }
        if self.bug == Bug::MarkerFromTheFirstAttempt {
            if let (Some(old), Some(new)) = (
                before.as_ref().and_then(|r| r.writer.as_ref()),
                d.write.as_mut().and_then(|r| r.writer.as_mut()),
            ) {
                if old.token == new.token {
                    new.until = old.until;
                }
            }
        }
        Ok(self.apply(req.key, &mut records, d))
    }
    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        let clock = self.clock();
        let mut records = self.records.lock().unwrap();
        let grace = Grace::or_ttl(None, req.ttl);
        let mut d = rules::prolong(records.get(req.key), clock, req.token, req.ttl, grace);
        if self.bug == Bug::ProlongRenewsEveryShare && d.outcome == ProlongOutcome::Prolonged {
            if let Some(State::Shared(s)) = d.write.as_mut().map(|r| &mut r.state) {
                let own = s
                    .holds
                    .iter()
                    .find(|sh| sh.hold.token == *req.token)
                    .map(|sh| (sh.hold.expires, sh.hold.forget));
                if let Some((expires, forget)) = own {
                    for sh in &mut s.holds {
                        sh.hold.expires = expires;
                        sh.hold.forget = forget;
                    }
                }
            }
        }
        Ok(self.apply(req.key, &mut records, d))
    }
    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        let clock = self.clock();
        let mut records = self.records.lock().unwrap();
        let record = records.get(req.key);
        let shared = matches!(record.map(|r| &r.state), Some(State::Shared(_)));
        let mut d = rules::release(record, clock, req.token, req.delay_after);
        if let (true, Some(write)) = (shared, d.write.as_mut()) {
            match (self.bug, d.outcome, req.delay_after) {
                (Bug::LateReleaseFreesEveryShare, ReleaseOutcome::ReleasedLate, _) => {
                    write.state = State::Free;
                }
                (Bug::CooldownBesideLiveShares, ReleaseOutcome::Released, Some(delay)) => {
                    write.state = State::Cooling {
                        until: clock.after(delay.as_millis()),
                    };
                }
                _ => {}
            }
        }
        Ok(self.apply(req.key, &mut records, d))
    }
    async fn inspect(&self, key: &Key) -> Result<LockState> {
        let records = self.records.lock().unwrap();
        let clock = self.clock();
        let state = rules::view(records.get(key), clock).into_state();
        let marker = records
            .get(key)
            .and_then(|r| r.writer.as_ref())
            .filter(|w| w.until > clock.now());
        Ok(match (self.bug, state, marker) {
            (Bug::InspectShowsALoneMarker, LockState::Free, Some(w)) => LockState::Shared {
                capacity: lock_core::Mode::UNBOUNDED,
                holds: Vec::new(),
                writer_waiting: Some(std::time::Duration::from_nanos(w.until - clock.now())),
            },
            (_, state, _) => state,
        })
    }
    async fn force_release(&self, key: &Key) -> Result<LockState> {
        let clock = self.clock();
        let mut records = self.records.lock().unwrap();
        let d = rules::force(records.get(key), clock).map(rules::View::into_state);
        Ok(self.apply(key, &mut records, d))
    }
    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        Ok(Some(self.waiters.subscribe(key.as_str())))
    }
}

impl Bent {
    fn decide_obtain(
        &self,
        record: Option<&Rec>,
        clock: Clock,
        req: &ObtainRequest<'_>,
    ) -> Result<Decision<ObtainOutcome, Token, HolderInfo>> {
        let ask = rules::Obtain {
            token: req.token,
            holder: req.holder,
            ttl: req.ttl,
            grace: Grace::or_ttl(None, req.ttl),
            fencing_floor: *self.fencing.lock().unwrap() + 1,
            mode: req.mode,
            queue: req.queue,
            change: match self.bug {
                Bug::ChangeOfAGoneHoldGranted => None,
                _ => req.change.map(|f| f.0),
            },
        };
        let d = rules::obtain(record, clock, ask);
        let outcome = d.outcome.into_outcome(req.ttl, "bent")?;
        Ok(Decision {
            outcome,
            write: d.write,
            wake: d.wake,
        })
    }
}

/// Bent backends with `bug`, and those it made (whose records it counts).
struct BentHarness(Bug, Mutex<Vec<Arc<Bent>>>);

fn bent(bug: Bug) -> BentHarness {
    BentHarness(bug, Mutex::default())
}

#[async_trait]
impl Harness for BentHarness {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        let backend = Arc::new(Bent {
            bug: self.0,
            records: Mutex::default(),
            fencing: Mutex::new(0),
            epoch: Instant::now(),
            waiters: Waiters::default(),
        });
        self.1.lock().unwrap().push(Arc::clone(&backend));
        backend
    }

    /// Bent has no sweep: every record it keeps lasts.
    async fn lasting_records(&self) -> Option<u64> {
        let made = self.1.lock().unwrap();
        Some(
            made.iter()
                .map(|b| b.records.lock().unwrap().len() as u64)
                .sum(),
        )
    }
}

/// `case` passes on the rules as they are, and fails on `bug`.
fn caught(bug: Bug, named: &str, case: Case) {
    let straight = Suite::new("bent", bent(Bug::None)).with_seed(MODEL_SEED);
    if let Err(e) = run(case(&straight)) {
        panic!("{named} fails on the unbent rules: {e}");
    }
    let suite = Suite::new("bent", bent(bug)).with_seed(MODEL_SEED);
    let result = run(case(&suite));
    assert!(result.is_err(), "{named} did not catch {bug:?}");
    println!("{named} caught {bug:?}: {}", result.unwrap_err());
}

/// The shared model's sequences are random: enough of them that each bug below is met
/// (24, the suite's default, missed one now and then).
const MODEL_CASES: u32 = 400;
/// And drawn from one seed, so that each run meets the same ones: with a fresh seed each
/// run, 400 sequences still missed `ExpiredShareReacquired` once in CI. Seeds 1 to 4 each
/// catch every bug below; a change to the model's generator that makes this one miss
/// fails here every time, never now and then.
const MODEL_SEED: u64 = 1;

macro_rules! catches {
    (shared_model $test:ident, $bug:ident) => {
        #[test]
        fn $test() {
            caught(Bug::$bug, "shared_model_sequences", |s| {
                Box::pin(cases::shared_model_sequences_with(s, MODEL_CASES, 50))
            });
        }
    };
    ($test:ident, $bug:ident, $case:ident) => {
        #[test]
        fn $test() {
            caught(Bug::$bug, stringify!($case), |s| Box::pin(cases::$case(s)));
        }
    };
}

catches!(
    refusing_the_last_permit_is_caught,
    RefusesTheLastPermit,
    a_semaphore_admits_exactly_its_capacity
);
catches!(
    admitting_one_past_the_capacity_is_caught,
    AdmitsOnePastTheCapacity,
    a_semaphore_admits_exactly_its_capacity
);
catches!(
    keeping_the_newest_expired_shares_is_caught,
    KeepsNewestExpiredShares,
    expired_shares_are_kept_oldest_first
);
catches!(
    a_marker_timed_from_the_first_attempt_is_caught,
    MarkerFromTheFirstAttempt,
    a_writers_marker_lives_from_its_last_busy_attempt
);
catches!(
    a_marker_that_never_lapses_is_caught,
    MarkerNeverLapses,
    a_writers_marker_lives_from_its_last_busy_attempt
);
catches!(
    a_downgrade_that_wakes_one_is_caught,
    DowngradeWakesOne,
    a_downgrade_wakes_every_waiter
);
catches!(
    a_late_release_freeing_every_share_is_caught,
    LateReleaseFreesEveryShare,
    a_late_release_of_one_share_leaves_the_others_alone
);
catches!(
    a_prolong_renewing_every_share_is_caught,
    ProlongRenewsEveryShare,
    a_shares_prolong_renews_that_share_only
);
catches!(
    a_cooldown_beside_live_shares_is_caught,
    CooldownBesideLiveShares,
    a_release_leaving_live_shares_starts_no_cooldown
);
catches!(
    an_expired_share_reacquired_is_caught,
    ExpiredShareReacquired,
    an_expired_share_asked_again_is_a_fresh_hold
);
catches!(
    a_change_of_a_gone_hold_granted_is_caught,
    ChangeOfAGoneHoldGranted,
    a_mode_change_of_a_hold_that_is_gone_is_lost
);
catches!(
    a_capacity_forgotten_when_shares_expire_is_caught,
    CapacityForgottenWhenSharesExpire,
    a_capacity_holds_while_any_share_is_remembered
);
catches!(
    a_busy_naming_the_oldest_hold_is_caught,
    BusyNamesTheOldestHold,
    busy_names_the_hold_that_opens_room
);
catches!(
    a_lone_marker_shown_by_inspect_is_caught,
    InspectShowsALoneMarker,
    inspect_shows_a_marker_only_beside_shares
);
catches!(shared_model refusing_the_last_permit_is_caught_by_the_shared_model, RefusesTheLastPermit);
catches!(shared_model admitting_one_past_the_capacity_is_caught_by_the_shared_model, AdmitsOnePastTheCapacity);
catches!(shared_model a_cooldown_beside_live_shares_is_caught_by_the_shared_model, CooldownBesideLiveShares);
catches!(
    keeping_free_records_is_caught,
    KeepsFreeRecords,
    keys_taken_and_released_leave_nothing_behind
);
// The model lets shares and markers expire within a sequence: the rules of expired holds
// are its too.
catches!(shared_model a_late_release_freeing_every_share_is_caught_by_the_shared_model, LateReleaseFreesEveryShare);
catches!(shared_model an_expired_share_reacquired_is_caught_by_the_shared_model, ExpiredShareReacquired);
catches!(shared_model a_capacity_forgotten_when_shares_expire_is_caught_by_the_shared_model, CapacityForgottenWhenSharesExpire);
catches!(shared_model a_marker_that_never_lapses_is_caught_by_the_shared_model, MarkerNeverLapses);
catches!(shared_model a_prolong_renewing_every_share_is_caught_by_the_shared_model, ProlongRenewsEveryShare);
