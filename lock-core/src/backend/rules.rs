//! The contract's decisions for one lock, written once: a pure function of the stored record,
//! the time and the request, giving the outcome and the record to write.
//!
//! Shared holds (semaphores, read locks, the writer's marker) are decided in the same
//! functions; their rules are on [`Shared`] and in the contract.
//!
//! [`step`] is the one entry: every operation ([`Ask`]) on one record at one instant, to
//! an answer ([`Answer`], said publicly as a [`Reply`]) and the record to write. The memory
//! and file backends (storages on the adapter, `backend::storage`), the Redis
//! WATCH/MULTI variant, MySQL/MariaDB and Postgres's client path decide with it; each keeps
//! only its storage (a map, a file under `flock`, a watched key, a locked row) and its
//! encoding ([`columns`] for the SQL rows). The Redis Lua script and the Postgres function
//! cannot call Rust: they keep their own code, and their tests run the same table of cases
//! (`lock_conformance::table`) through a real server. A backend of your own decides with
//! [`step`] too, most simply by implementing the adapter's `Storage`.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::backend::rules::{self, Clock, Obtain};
//! use lock_core::{Mode, ObtainOutcome, Ttl};
//! use lock_core::backend::Grace;
//!
//! let ttl = Ttl::from_millis(30_000)?;
//! let now = Clock::millis(1_000_000);
//! // Nothing stored for the key: token 7 gets it, and the backend writes `decision.write`.
//! let ask = Obtain {
//!     token: &7u32, holder: &"me", ttl, grace: Grace::or_ttl(None, ttl), fencing_floor: 1,
//!     mode: Mode::Exclusive, queue: false, change: None,
//! };
//! let decision = rules::obtain(None, now, ask);
//! assert!(matches!(decision.outcome, rules::Obtained::Acquired { .. }));
//! let stored = decision.write.expect("an acquisition writes");
//!
//! // 10 s later, token 8 finds it busy for 20 s more, and nothing is written.
//! let later = Clock::millis(1_010_000);
//! let ask = Obtain { token: &8u32, holder: &"you", ..ask };
//! let decision = rules::obtain(Some(&stored), later, ask);
//! match decision.outcome {
//!     rules::Obtained::Busy { holder, remaining, .. } => {
//!         assert_eq!(holder, Some(&"me"));
//!         assert_eq!(remaining, Duration::from_secs(20));
//!     }
//!     other => panic!("{other:?}"),
//! }
//! assert!(decision.write.is_none());
//! # Ok::<(), lock_core::Error>(())
//! ```
//!
//! # Time
//! Times are `u64` ticks of the backend's clock: milliseconds ([`Clock::millis`]: the file
//! backend's wall clock, Redis `TIME`) or nanoseconds ([`Clock::nanos`]: the memory backend's
//! monotonic clock, exact under `tokio::time::pause`). The clock is read after every wait
//! the operation had (the file lock, the WATCH read), never before.

mod answer;
pub mod columns;
mod phase;
mod record;
mod shared;
mod step;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_boundaries;

pub use answer::{Decision, Obtain, Obtained, Refusal, View, Wake};
pub use phase::{forgotten, wall_clock_floor};
pub use record::{Clock, Hold, Record, State, Writer};
pub use shared::{Share, Shared};
pub use step::{step, Answer, Ask, Reply};

use phase::{last_fencing, live_writer, next_fencing, phase, Phase};

use crate::{BusyReason, Fencing, Grace, Mode, ProlongOutcome, ReleaseOutcome, Ttl};

/// The end of a hold taken or renewed now for `ttl`, and the end of its grace after it.
fn hold_times(clock: Clock, ttl: Ttl, grace: Grace) -> (u64, u64) {
    let expires = clock.after(ttl.as_millis());
    (
        expires,
        expires.saturating_add(clock.ticks(grace.as_millis())),
    )
}

/// `hold` renewed for `ttl` (and `grace` after it) from now.
fn renewed<T: Clone, H: Clone>(
    hold: &Hold<T, H>,
    clock: Clock,
    ttl: Ttl,
    grace: Grace,
) -> Hold<T, H> {
    let (expires, forget) = hold_times(clock, ttl, grace);
    Hold {
        expires,
        forget,
        ..hold.clone()
    }
}

/// A fresh hold of one for the asker.
fn fresh_hold<T: Clone, H: Clone>(clock: Clock, ask: &Obtain<'_, T, H>) -> Hold<T, H> {
    let (expires, forget) = hold_times(clock, ask.ttl, ask.grace);
    Hold {
        token: ask.token.clone(),
        holder: ask.holder.clone(),
        holds: 1,
        expires,
        forget,
    }
}

/// The writer's marker to keep after a write by `token`: another writer's live marker
/// stays, `token`'s own (it got what it waited for, or gave up) and a dead one go.
fn writer_after<T: Clone + PartialEq, H>(
    record: Option<&Record<T, H>>,
    clock: Clock,
    token: &T,
) -> Option<Writer<T>> {
    live_writer(record, clock)
        .filter(|w| w.token != *token)
        .cloned()
}

/// Decides an obtain.
///
/// Exclusive (the mutex):
/// - Cooling: `Busy` with no holder and the remaining cooldown.
/// - Live and `token`'s: `Reacquired`, one more hold, the ttl reset, the fencing kept.
/// - Live and another's: `Busy` with the holder and its remaining ttl.
/// - Live shared holds of other tokens: `Busy` with the hold that ends last and its
///   remaining ttl; with [`Obtain::queue`], a writer's marker for `ttl` (unless another
///   writer's marker lives). The caller's own share, if it has one, is upgraded when it is
///   the only live hold (see [`Shared`]).
/// - Free, expired (whoever held it) or past its grace: `Acquired` with one hold and the
///   fencing token `max(last + 1, fencing_floor)`.
///
/// Shared: see [`Shared`].
///
/// A mode change ([`Obtain::change`]) whose hold is not the token's live hold in the
/// other mode with that fencing token: `Lost`, nothing written.
pub fn obtain<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
    ask: Obtain<'_, T, H>,
) -> Decision<Obtained<'r, H>, T, H> {
    if ask.mode.problem().is_some() {
        return nothing(Obtained::Refused(Refusal::Invalid(ask.mode)));
    }
    if let Some(fencing) = ask.change {
        if !changes_a_live_hold(record, clock, ask.token, fencing, ask.mode) {
            return nothing(Obtained::Lost);
        }
    }
    match ask.mode {
        Mode::Exclusive => obtain_exclusive(record, clock, ask),
        Mode::Shared { capacity, weight } => shared::obtain(record, clock, ask, capacity, weight),
    }
}

/// Whether `token` holds the key live, in the mode other than `to`, by the hold with
/// fencing token `fencing`: what a mode change to `to` needs to find.
fn changes_a_live_hold<T: PartialEq, H>(
    record: Option<&Record<T, H>>,
    clock: Clock,
    token: &T,
    fencing: u64,
    to: Mode,
) -> bool {
    match (phase(record, clock), to) {
        (Phase::Live(h), Mode::Shared { .. }) => {
            h.token == *token && last_fencing(record) == fencing
        }
        (Phase::Shared(s), Mode::Exclusive) => s
            .live(clock)
            .iter()
            .any(|sh| sh.hold.token == *token && sh.fencing == fencing),
        _ => false,
    }
}

fn obtain_exclusive<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
    ask: Obtain<'_, T, H>,
) -> Decision<Obtained<'r, H>, T, H> {
    let busy = |hold: &'r Hold<T, H>, reason, holders| Obtained::Busy {
        holder: Some(&hold.holder),
        remaining: clock.until(hold.expires),
        reason,
        holders,
    };
    match phase(record, clock) {
        Phase::Live(hold) if hold.token == *ask.token => {
            let holds = hold.holds.saturating_add(1);
            let next = Hold {
                holds,
                ..renewed(hold, clock, ask.ttl, ask.grace)
            };
            Decision {
                outcome: Obtained::Reacquired { holds },
                write: Some(rewritten(record, clock, State::Held(next))),
                wake: Wake::Nobody,
            }
        }
        // Behind another exclusive holder no marker: readers are kept out by the holder
        // anyway, and a marker would make its release wake every waiter (a mutex's waiters
        // would all come at once). Should readers win the race after the release, the next
        // busy attempt, behind them, marks.
        Phase::Live(hold) => nothing(busy(hold, BusyReason::Held, 1)),
        Phase::Shared(s) => {
            let (own, others): (Vec<_>, Vec<_>) = s
                .live(clock)
                .into_iter()
                .partition(|sh| sh.hold.token == *ask.token);
            // An upgrade of a share taken more than once: the reentrant holds go first.
            if let Some(own) = own.first().filter(|own| own.hold.holds > 1) {
                let held = Mode::Shared {
                    capacity: s.capacity,
                    weight: own.weight,
                };
                return nothing(Obtained::Refused(Refusal::Mode { held }));
            }
            match others.iter().max_by_key(|sh| sh.hold.expires) {
                Some(last) => {
                    let outcome = busy(&last.hold, BusyReason::Shared, count(others.len()));
                    mark_writer(record, clock, &ask, outcome)
                }
                // Nobody else holds it live: a fresh exclusive hold (for an upgrade too, whose
                // share it replaces).
                None => acquire_exclusive(record, clock, ask),
            }
        }
        Phase::Free | Phase::Expired(_) => acquire_exclusive(record, clock, ask),
        Phase::Cooling { until } => nothing(cooling(clock, until)),
    }
}

/// A fresh exclusive hold for the asker; every earlier hold is gone (their late calls are
/// `Lost`).
fn acquire_exclusive<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
    ask: Obtain<'_, T, H>,
) -> Decision<Obtained<'r, H>, T, H> {
    let fencing = next_fencing(record, ask.fencing_floor);
    Decision {
        outcome: Obtained::Acquired {
            fencing: Fencing(fencing),
        },
        write: Some(Record {
            fencing,
            state: State::Held(fresh_hold(clock, &ask)),
            writer: writer_after(record, clock, ask.token),
        }),
        wake: Wake::Nobody,
    }
}

/// A busy exclusive outcome, leaving the asker's writer's marker when it queues.
fn mark_writer<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
    ask: &Obtain<'_, T, H>,
    outcome: Obtained<'r, H>,
) -> Decision<Obtained<'r, H>, T, H> {
    let others = live_writer(record, clock).is_some_and(|w| w.token != *ask.token);
    match record {
        Some(r) if ask.queue && !others => Decision {
            outcome,
            write: Some(Record {
                writer: Some(Writer {
                    token: ask.token.clone(),
                    until: clock.after(ask.ttl.as_millis()),
                }),
                ..r.clone()
            }),
            wake: Wake::Nobody,
        },
        _ => nothing(outcome),
    }
}

/// Decides a prolong: `Prolonged` when `token` holds it live, `ProlongedLate` when its hold
/// expired but is within its grace (nobody took its room since), else `Lost` and nothing
/// written. The hold count and the fencing token are kept.
pub fn prolong<T: Clone + PartialEq, H: Clone>(
    record: Option<&Record<T, H>>,
    clock: Clock,
    token: &T,
    ttl: Ttl,
    grace: Grace,
) -> Decision<ProlongOutcome, T, H> {
    let (hold, outcome) = match phase(record, clock) {
        Phase::Live(h) if h.token == *token => (h, ProlongOutcome::Prolonged),
        Phase::Expired(h) if h.token == *token => (h, ProlongOutcome::ProlongedLate),
        Phase::Shared(s) => return shared::prolong(record, s, clock, token, ttl, grace),
        _ => return nothing(ProlongOutcome::Lost),
    };
    Decision {
        outcome,
        write: Some(rewritten(
            record,
            clock,
            State::Held(renewed(hold, clock, ttl, grace)),
        )),
        wake: Wake::Nobody,
    }
}

/// Decides a release: `Decremented` when `token` holds it live more than once (the expiry
/// kept, `delay` ignored); `Released` when it holds it live once, `ReleasedLate` when its
/// hold expired within the grace (whatever the hold count): the hold is gone, and a key
/// left without holds becomes free, or cooling for `delay`. Anything else is `Lost`; then
/// only `token`'s own writer's marker, if it left one, is taken away.
pub fn release<T: Clone + PartialEq, H: Clone>(
    record: Option<&Record<T, H>>,
    clock: Clock,
    token: &T,
    delay: Option<Ttl>,
) -> Decision<ReleaseOutcome, T, H> {
    let outcome = match phase(record, clock) {
        Phase::Live(h) if h.token == *token && h.holds > 1 => {
            let holds = h.holds - 1;
            return Decision {
                outcome: ReleaseOutcome::Decremented { holds },
                write: Some(rewritten(
                    record,
                    clock,
                    State::Held(Hold { holds, ..h.clone() }),
                )),
                wake: Wake::Nobody,
            };
        }
        Phase::Live(h) if h.token == *token => ReleaseOutcome::Released,
        Phase::Expired(h) if h.token == *token => ReleaseOutcome::ReleasedLate,
        Phase::Shared(s) => return shared::release(record, s, clock, token, delay),
        _ => return give_up_waiting(record, clock, token),
    };
    let writer = writer_after(record, clock, token);
    Decision {
        outcome,
        wake: if writer.is_some() {
            Wake::All
        } else {
            Wake::One
        },
        write: Some(Record {
            writer,
            ..freed(record, clock, delay)
        }),
    }
}

/// A release by a token that holds nothing: `Lost`; its own writer's marker, if it left
/// one, is taken away (the writer gave up).
fn give_up_waiting<T: Clone + PartialEq, H: Clone>(
    record: Option<&Record<T, H>>,
    clock: Clock,
    token: &T,
) -> Decision<ReleaseOutcome, T, H> {
    match record {
        Some(r) if live_writer(record, clock).is_some_and(|w| w.token == *token) => Decision {
            outcome: ReleaseOutcome::Lost,
            write: Some(Record {
                writer: None,
                ..r.clone()
            }),
            wake: Wake::All,
        },
        _ => nothing(ReleaseOutcome::Lost),
    }
}

/// What an observer sees: an expired hold reads as gone. A waiting writer's marker shows
/// only beside shared holds.
pub fn view<'r, T, H>(record: Option<&'r Record<T, H>>, clock: Clock) -> View<'r, H> {
    match phase(record, clock) {
        Phase::Free | Phase::Expired(_) => View::Free,
        Phase::Cooling { until } => View::Cooling {
            remaining: clock.until(until),
        },
        Phase::Live(h) => View::Held {
            holder: &h.holder,
            fencing: Fencing(last_fencing(record)),
            remaining: clock.until(h.expires),
            holds: h.holds,
        },
        Phase::Shared(s) => s.view(clock, live_writer(record, clock).map(|w| w.until)),
    }
}

/// Breaks the lock whoever holds it: the outcome is what it was, the record becomes free
/// (keeping its fencing token, dropping every hold and any writer's marker). Nothing
/// stored: nothing written.
pub fn force<'r, T: Clone, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
) -> Decision<View<'r, H>, T, H> {
    Decision {
        outcome: view(record, clock),
        write: record.map(|_| freed(record, clock, None)),
        wake: if record.is_some() {
            Wake::All
        } else {
            Wake::Nobody
        },
    }
}

/// The record of a released key: free, or cooling for `delay`, with its fencing token and
/// no writer's marker.
fn freed<T, H>(record: Option<&Record<T, H>>, clock: Clock, delay: Option<Ttl>) -> Record<T, H> {
    Record::new(
        last_fencing(record),
        match delay {
            Some(d) => State::Cooling {
                until: clock.after(d.as_millis()),
            },
            None => State::Free,
        },
    )
}

/// `record` with a new `state`: its fencing token and its live writer's marker kept (a dead
/// marker dropped). Builds the record afresh rather than cloning the old one, whose holds
/// (holder info of up to 4 KiB each) `state` replaces.
fn rewritten<T: Clone, H>(
    record: Option<&Record<T, H>>,
    clock: Clock,
    state: State<T, H>,
) -> Record<T, H> {
    Record {
        fencing: last_fencing(record),
        state,
        writer: live_writer(record, clock).cloned(),
    }
}

fn nothing<O, T, H>(outcome: O) -> Decision<O, T, H> {
    Decision {
        outcome,
        write: None,
        wake: Wake::Nobody,
    }
}

/// A count of holds as the outcomes carry it.
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Busy while cooling until `until`: no holder, the remaining cooldown.
fn cooling<'r, H>(clock: Clock, until: u64) -> Obtained<'r, H> {
    Obtained::Busy {
        holder: None,
        remaining: clock.until(until),
        reason: BusyReason::Cooling,
        holders: 0,
    }
}
