//! The reference model of shared holds, and the property that runs random sequences of
//! exclusive obtains, semaphore obtains (capacities, weights) and read obtains mixed, a
//! waiting writer's marker, prolongs, releases (some with a cooldown) and inspects against
//! it.
//!
//! Written from the contract's "Shared holds" section alone, not from
//! `lock_core::backend::rules`: a backend that decides with those rules is checked against
//! a second reading of the contract. Every ttl and cooldown is long (nothing ends within a
//! sequence), so each step has exactly one right answer; expiry, late and lost per hold are
//! the named cases' (`expired_shares_are_kept_oldest_first` and the rest). A `Busy` is
//! compared field by field: its reason, how many live holds it counts, the hold whose end
//! opens room (by its holder) and the time until then (within a second).
//!
//! The invariant, checked through `inspect` after every step: the live shared weights never
//! exceed the key's capacity, and an exclusive hold is alone.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use lock_core::{ErrorKind, LockBackend, Mode, ObtainOutcome};
use proptest::prelude::*;

use crate::harness::Owner;

mod reference;
use crate::{CaseResult, Failure, Suite};
use reference::{Expect, Model};

/// Owners in every sequence (one key).
const OWNERS: usize = 4;
/// Every ttl and cooldown: nothing ends within a sequence.
const TTL: Duration = Duration::from_secs(60);
/// How far a `Busy`'s remaining time may be from the model's: the call's own time, and a
/// server's clock read in whole milliseconds.
const SLACK: Duration = Duration::from_secs(1);
/// Two ends this close are the same end to the model (a server's clock in milliseconds
/// cannot order holds made within one).
const TIE: Duration = Duration::from_millis(5);

/// How an obtain asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// Exclusive; with `queue`, a waiting writer (may leave a marker).
    Exclusive { queue: bool },
    /// Shared: `weight` of `capacity` permits.
    Shared { capacity: u32, weight: u32 },
}

impl Ask {
    fn mode(self) -> Mode {
        match self {
            Ask::Exclusive { .. } => Mode::Exclusive,
            Ask::Shared { capacity, weight } => Mode::Shared { capacity, weight },
        }
    }
}

/// One step of a sequence.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Obtain {
        owner: usize,
        ask: Ask,
    },
    Prolong {
        owner: usize,
    },
    /// With `delay`, a cooldown of [`TTL`] when the release leaves no live hold.
    Release {
        owner: usize,
        delay: bool,
    },
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Obtain {
                owner,
                ask: Ask::Exclusive { queue },
            } => write!(f, "obtain(o{owner}, exclusive, queue={queue})"),
            Op::Obtain {
                owner,
                ask: Ask::Shared { capacity, weight },
            } => write!(f, "obtain(o{owner}, {weight} of {capacity})"),
            Op::Prolong { owner } => write!(f, "prolong(o{owner})"),
            Op::Release {
                owner,
                delay: false,
            } => write!(f, "release(o{owner})"),
            Op::Release { owner, delay: true } => write!(f, "release(o{owner}, delay)"),
        }
    }
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS;
    // Capacities 2 and 3 and read holds (a mismatch now and then), weights within them.
    let shared = (2u32..=3)
        .prop_flat_map(|capacity| (Just(capacity), 1..=capacity))
        .prop_map(|(capacity, weight)| Ask::Shared { capacity, weight });
    let read = Just(Ask::Shared {
        capacity: Mode::UNBOUNDED,
        weight: 1,
    });
    let ask = prop_oneof![
        3 => shared,
        2 => read,
        2 => any::<bool>().prop_map(|queue| Ask::Exclusive { queue }),
    ];
    prop_oneof![
        5 => (owner.clone(), ask).prop_map(|(owner, ask)| Op::Obtain { owner, ask }),
        1 => owner.clone().prop_map(|owner| Op::Prolong { owner }),
        3 => owner.clone().prop_map(|owner| Op::Release { owner, delay: false }),
        1 => owner.prop_map(|owner| Op::Release { owner, delay: true }),
    ]
}

/// How far apart two instants are.
fn apart(a: Instant, b: Instant) -> Duration {
    a.max(b) - a.min(b)
}

/// Whether a backend's answer is the model's.
fn agree<T: PartialEq + fmt::Debug>(got: lock_core::Result<T>, want: T) -> Result<(), String> {
    match got {
        Ok(got) if got == want => Ok(()),
        Ok(got) => Err(format!("expected {want:?}, got {got:?}")),
        Err(e) => Err(e.to_string()),
    }
}

async fn run_sequence(backend: Arc<dyn LockBackend>, ops: &[Op]) -> Result<(), String> {
    // A key of its own per sequence: a failed one leaves holds behind for a minute.
    let key = format!(
        "model-shared-{}",
        &lock_core::backend::Token::generate()
            .map_err(|e| e.to_string())?
            .to_hex()[..12]
    );
    let owners: Vec<Owner> = (0..OWNERS)
        .map(|o| Owner::new(&backend, &key, &format!("owner {o}")))
        .collect();
    let mut model = Model::default();
    let expiry = backend.capabilities().expiry;
    for (step, &op) in ops.iter().enumerate() {
        let fail = |why: String| format!("step {step} {op:?}: {why}");
        let now = Instant::now();
        match op {
            Op::Obtain { owner, ask } => {
                let queue = matches!(ask, Ask::Exclusive { queue: true });
                let got = owners[owner].obtain_as(TTL, ask.mode(), queue).await;
                let want = model.obtain(owner, ask, now);
                match (&want, &got) {
                    (Expect::Refused, Err(e)) if e.kind() == ErrorKind::InvalidInput => {}
                    (Expect::Acquired, Ok(ObtainOutcome::Acquired { fencing, .. })) => {
                        if model.last_fencing.is_some_and(|last| *fencing <= last) {
                            return Err(fail(format!(
                                "fencing {fencing:?} after {:?}",
                                model.last_fencing
                            )));
                        }
                        model.last_fencing = Some(*fencing);
                    }
                    (Expect::Downgraded, Ok(ObtainOutcome::Acquired { fencing, .. }))
                        if Some(*fencing) == model.last_fencing => {}
                    (Expect::Reacquired(n), Ok(ObtainOutcome::Reacquired { holds }))
                        if n == holds => {}
                    (
                        Expect::Busy {
                            reason,
                            holders,
                            opener,
                            until,
                        },
                        Ok(ObtainOutcome::Busy(b)),
                    ) if b.reason == *reason && b.holders == *holders => {
                        let remaining = until.saturating_duration_since(now);
                        // A server that cannot tell how long ago a hold was set (leases)
                        // answers at most the longest the hold may last, never less than
                        // what is left.
                        let fits = if expiry.is_exact() {
                            b.remaining.abs_diff(remaining) <= SLACK
                        } else {
                            b.remaining + SLACK >= remaining
                                && b.remaining <= expiry.longest(TTL) + SLACK
                        };
                        if !fits {
                            return Err(fail(format!(
                                "Busy says room opens in {:?}, the model in {remaining:?}: {b:?}",
                                b.remaining
                            )));
                        }
                        let named = b
                            .holder
                            .as_ref()
                            .and_then(|h| owners.iter().position(|o| o.holder == *h));
                        let same = match (named, opener) {
                            (None, None) => true,
                            (Some(n), Some(o)) => {
                                n == *o
                                    || model
                                        .holds
                                        .get(&n)
                                        .is_some_and(|h| apart(h.ends, model.holds[o].ends) <= TIE)
                            }
                            _ => false,
                        };
                        if !same {
                            return Err(fail(format!(
                                "Busy names {named:?} as the hold that opens room, the model \
                                 o{opener:?}: {b:?}"
                            )));
                        }
                    }
                    _ => return Err(fail(format!("expected {want:?}, got {got:?}"))),
                }
            }
            Op::Prolong { owner } => {
                let got = owners[owner].prolong(TTL).await;
                agree(got, model.prolong(owner, now)).map_err(fail)?;
            }
            Op::Release { owner, delay } => {
                let got = owners[owner].release(delay.then_some(TTL)).await;
                agree(got, model.release(owner, delay, now)).map_err(fail)?;
            }
        }
        // Every step ends with an inspect: the model's state, and the invariant.
        let state = owners[0].inspect().await.map_err(|e| fail(e.to_string()))?;
        model
            .check_state(&state)
            .map_err(|why| fail(format!("inspect answered {state:?}: {why}")))?;
    }
    for owner in &owners {
        let _ = owner.release(None).await;
    }
    Ok(())
}

/// Random sequences of exclusive, semaphore (capacities 2 and 3, weights within them) and
/// read obtains mixed, waiting writers, prolongs, releases (some with a cooldown) and
/// inspects, by 4 owners on one key, each step checked against a reference model of the
/// contract's shared holds (a `Busy` field by field); after every step
/// `inspect` shows the live weights within the capacity and an exclusive hold alone. A
/// failure is shrunk to a minimal sequence. Skipped, with a line on stderr, on a backend
/// without `Capabilities::shared`. `LOCK_CONFORMANCE_CASES` sets the number of sequences.
pub async fn shared_model_sequences(suite: &Suite) -> CaseResult {
    shared_model_sequences_with(suite, crate::cases::model::case_count(), 200).await
}

/// [`shared_model_sequences`] with an explicit number of sequences and of shrink steps.
pub async fn shared_model_sequences_with(
    suite: &Suite,
    cases: u32,
    shrink_iters: u32,
) -> CaseResult {
    let backend = suite.harness.backend().await;
    if !backend.capabilities().shared {
        super::report(format_args!(
            "{}: shared_model_sequences: skipped, the backend keeps exclusive locks only",
            suite.name
        ));
        return Ok(());
    }
    let strategy = proptest::collection::vec(op_strategy(), 1..32);
    crate::cases::model::run_sequences(
        cases,
        shrink_iters,
        strategy,
        backend,
        |backend, ops| async move { run_sequence(backend, &ops).await },
    )
    .map_err(|e| Failure(format!("shared model sequence failed: {e}")))
}
