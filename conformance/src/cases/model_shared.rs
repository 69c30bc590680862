//! The reference model of shared holds, and the property that runs random sequences of
//! exclusive obtains, semaphore obtains (capacities, weights) and read obtains mixed, a
//! waiting writer's marker, prolongs, releases (some with a cooldown), inspects and pauses
//! against it.
//!
//! Written from the contract's "Shared holds" section alone, not from
//! `lock_core::backend::rules`: a backend that decides with those rules is checked against
//! a second reading of the contract. A hold or a marker is taken for a short ttl now and
//! then, and a pause waits until those have surely ended (or also past the grace the
//! contract promises), so shares expire, are kept while their room is untaken (oldest
//! admission first), come back late or are lost within a sequence; where timing leaves
//! more than one answer right, the model keeps every state the key can be in and the
//! answer decides (`reference`). A `Busy` is compared field by field: its reason, how many
//! live holds it counts, the hold whose end opens room (by its holder) and the time until
//! then (within a second).
//!
//! The invariant, checked through `inspect` after every step: the live shared weights never
//! exceed the key's capacity, and an exclusive hold is alone.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use lock_core::{ErrorKind, LockBackend, Mode, ObtainOutcome};
use proptest::prelude::*;

use crate::cases::model::Span;
use crate::harness::Owner;

mod reference;
mod worlds;
use crate::cases::model::reference::Window;
use crate::{CaseResult, Failure, Suite};
use reference::{Expect, World};
use worlds::Model;

/// Owners in every sequence (one key).
const OWNERS: usize = 4;
/// How far a `Busy`'s remaining time may be from the model's: the call's own time, and a
/// server's clock read in whole milliseconds.
const SLACK: Duration = Duration::from_secs(1);
/// Two ends this close (beside the windows of the calls that set them) are the same end to
/// the model: a server's clock in milliseconds cannot order holds made within one.
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
        ttl: Span,
    },
    Prolong {
        owner: usize,
        ttl: Span,
    },
    /// With `delay`, a long cooldown when the release leaves no live hold.
    Release {
        owner: usize,
        delay: bool,
    },
    /// Waits until every short hold and marker has surely ended; with `past_grace`, a
    /// short ttl more, so that they may also be forgotten.
    Pause {
        past_grace: bool,
    },
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ttl = |t: &Span| match t {
            Span::Short => ", short",
            Span::Long => "",
        };
        match self {
            Op::Obtain {
                owner,
                ask: Ask::Exclusive { queue },
                ttl: t,
            } => write!(f, "obtain(o{owner}, exclusive, queue={queue}{})", ttl(t)),
            Op::Obtain {
                owner,
                ask: Ask::Shared { capacity, weight },
                ttl: t,
            } => write!(f, "obtain(o{owner}, {weight} of {capacity}{})", ttl(t)),
            Op::Prolong { owner, ttl: t } => write!(f, "prolong(o{owner}{})", ttl(t)),
            Op::Release {
                owner,
                delay: false,
            } => write!(f, "release(o{owner})"),
            Op::Release { owner, delay: true } => write!(f, "release(o{owner}, delay)"),
            Op::Pause { past_grace: false } => write!(f, "pause"),
            Op::Pause { past_grace: true } => write!(f, "pause(past grace)"),
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
    let ttl = prop_oneof![3 => Just(Span::Long), 1 => Just(Span::Short)];
    prop_oneof![
        5 => (owner.clone(), ask, ttl.clone()).prop_map(|(owner, ask, ttl)| Op::Obtain { owner, ask, ttl }),
        1 => (owner.clone(), ttl).prop_map(|(owner, ttl)| Op::Prolong { owner, ttl }),
        3 => owner.clone().prop_map(|owner| Op::Release { owner, delay: false }),
        1 => owner.prop_map(|owner| Op::Release { owner, delay: true }),
        1 => any::<bool>().prop_map(|past_grace| Op::Pause { past_grace }),
    ]
}

/// Whether a backend's `Busy` is the one a world expects.
fn judge_busy(
    want: &Expect,
    b: &lock_core::Busy,
    world: &World,
    owners: &[Owner],
    at: Window,
    expiry: lock_core::backend::Expiry,
) -> Result<(), String> {
    let Expect::Busy {
        reason,
        holders,
        openers,
        until,
        ttl,
    } = want
    else {
        return Err(format!("expected {want:?}, got {b:?}"));
    };
    if b.reason != *reason || b.holders != *holders {
        return Err(format!("expected {want:?}, got {b:?}"));
    }
    let remaining = until.saturating_duration_since(at.sent);
    // A server that cannot tell how long ago a hold was set (leases) answers at most the
    // longest the hold may last, never less than what is left.
    let fits = if expiry.is_exact() {
        b.remaining.abs_diff(remaining) <= SLACK
    } else {
        b.remaining + SLACK >= remaining && b.remaining <= expiry.longest(*ttl) + SLACK
    };
    if !fits {
        return Err(format!(
            "Busy says room opens in {:?}, the model in {remaining:?}: {b:?}",
            b.remaining
        ));
    }
    let named = b
        .holder
        .as_ref()
        .and_then(|h| owners.iter().position(|o| o.holder == *h));
    let same = match named {
        None => openers.is_empty(),
        Some(n) => openers.contains(&n),
    };
    match same {
        true => Ok(()),
        false => Err(format!(
            "Busy names {named:?} as the hold that opens room, the model one of {openers:?} \
             ({world:?}): {b:?}"
        )),
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
    let expiry = backend.capabilities().expiry;
    let mut model = Model::new(expiry);
    let short = Span::Short.duration();
    for (step, &op) in ops.iter().enumerate() {
        let fail = |why: String| format!("step {step} {op:?}: {why}");
        let sent = Instant::now();
        match op {
            Op::Obtain { owner, ask, ttl } => {
                let queue = matches!(ask, Ask::Exclusive { queue: true });
                let got = owners[owner]
                    .obtain_as(ttl.duration(), ask.mode(), queue)
                    .await;
                let at = Window {
                    sent,
                    answered: Instant::now(),
                };
                let last = model.last_fencing;
                model
                    .step(at, |world| {
                        let want = world.obtain(owner, ask, ttl.duration(), at);
                        match (&want, &got) {
                            (Expect::Refused, Err(e)) if e.kind() == ErrorKind::InvalidInput => {
                                Ok(())
                            }
                            // A fresh hold's token exceeds every token before it.
                            (Expect::Acquired, Ok(ObtainOutcome::Acquired { fencing, .. })) => {
                                if last.is_some_and(|last| *fencing <= last) {
                                    return Err(format!("fencing {fencing:?} after {last:?}"));
                                }
                                world.granted(owner, *fencing);
                                Ok(())
                            }
                            (
                                Expect::Downgraded(held),
                                Ok(ObtainOutcome::Acquired { fencing, .. }),
                            ) if held.is_none_or(|f| f == *fencing) => {
                                world.granted(owner, *fencing);
                                Ok(())
                            }
                            (Expect::Reacquired(n), Ok(ObtainOutcome::Reacquired { holds }))
                                if n == holds =>
                            {
                                Ok(())
                            }
                            (Expect::Busy { .. }, Ok(ObtainOutcome::Busy(b))) => {
                                judge_busy(&want, b, world, &owners, at, expiry)
                            }
                            _ => Err(format!("expected {want:?}, got {got:?}")),
                        }
                    })
                    .map_err(fail)?;
                if let Ok(ObtainOutcome::Acquired { fencing, .. }) = &got {
                    model.last_fencing = model.last_fencing.max(Some(*fencing));
                }
            }
            Op::Prolong { owner, ttl } => {
                let got = owners[owner].prolong(ttl.duration()).await;
                let at = Window {
                    sent,
                    answered: Instant::now(),
                };
                model
                    .step(at, |world| {
                        agree(&got, world.prolong(owner, ttl.duration(), at))
                    })
                    .map_err(fail)?;
            }
            Op::Release { owner, delay } => {
                let delay = delay.then(|| Span::Long.duration());
                let got = owners[owner].release(delay).await;
                let at = Window {
                    sent,
                    answered: Instant::now(),
                };
                model
                    .step(at, |world| agree(&got, world.release(owner, delay, at)))
                    .map_err(fail)?;
            }
            Op::Pause { past_grace } => {
                if let Some(ended) = model.short_ends(short) {
                    let extra = if past_grace { short } else { Duration::ZERO };
                    tokio::time::sleep_until(ended + extra).await;
                }
            }
        }
        // Every step ends with an inspect: the model's state, and the invariant.
        let sent = Instant::now();
        let state = owners[0].inspect().await.map_err(|e| fail(e.to_string()))?;
        let at = Window {
            sent,
            answered: Instant::now(),
        };
        model
            .step(at, |world| world.check_state(&state))
            .map_err(|why| fail(format!("inspect answered {state:?}: {why}")))?;
    }
    for owner in &owners {
        let _ = owner.release(None).await;
    }
    Ok(())
}

/// Whether a backend's answer is the model's.
fn agree<T: PartialEq + fmt::Debug>(got: &lock_core::Result<T>, want: T) -> Result<(), String> {
    match got {
        Ok(got) if *got == want => Ok(()),
        Ok(got) => Err(format!("expected {want:?}, got {got:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Random sequences of exclusive, semaphore (capacities 2 and 3, weights within them) and
/// read obtains mixed, waiting writers, prolongs, releases (some with a cooldown),
/// inspects and pauses, by 4 owners on one key, holds and markers short-lived now and then
/// (so shares expire, are kept within their grace, come back late or are lost), each step
/// checked against a reference model of the contract's shared holds (a `Busy` field by
/// field); after every step
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
    let seed = suite.sequence_seed();
    crate::cases::model::run_sequences(
        cases,
        shrink_iters,
        seed,
        strategy,
        backend,
        |backend, ops| async move { run_sequence(backend, &ops).await },
    )
    .map_err(|e| Failure(format!("shared model sequence failed: {e}")))
}
