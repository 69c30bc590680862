//! The contract's decisions for one lock, written once: a pure function of the stored record,
//! the time and the request, giving the outcome and the record to write.
//!
//! The memory backend, the file backend and the Redis WATCH/MULTI variant decide with these
//! functions; each keeps only its storage (a map, a file under `flock`, a watched key) and
//! its encoding. The Redis Lua script and the Postgres function cannot call Rust: they keep
//! their own code, and their tests run the same table of cases (`lock_conformance::table`)
//! through a real server. A backend of your own can decide with these functions too.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::backend::rules::{self, Clock, Obtain};
//! use lock_core::{ObtainOutcome, Ttl};
//! use lock_core::backend::Grace;
//!
//! let ttl = Ttl::from_millis(30_000)?;
//! let now = Clock::millis(1_000_000);
//! // Nothing stored for the key: token 7 gets it, and the backend writes `decision.write`.
//! let ask = Obtain { token: &7u32, holder: &"me", ttl, grace: Grace::or_ttl(None, ttl), fencing_floor: 1 };
//! let decision = rules::obtain(None, now, ask);
//! assert!(matches!(decision.outcome, rules::Obtained::Acquired { .. }));
//! let stored = decision.write.expect("an acquisition writes");
//!
//! // 10 s later, token 8 finds it busy for 20 s more, and nothing is written.
//! let later = Clock::millis(1_010_000);
//! let ask = Obtain { token: &8u32, holder: &"you", ttl, grace: Grace::or_ttl(None, ttl), fencing_floor: 1 };
//! let decision = rules::obtain(Some(&stored), later, ask);
//! match decision.outcome {
//!     rules::Obtained::Busy { holder, remaining } => {
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

use std::time::Duration;

use crate::{
    Busy, Fencing, Grace, HolderInfo, LockState, ObtainOutcome, ProlongOutcome, ReleaseOutcome, Ttl,
};

/// The instant of one decision on the backend's clock, and the clock's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    now: u64,
    tick_ns: u64,
}

impl Clock {
    /// `now_ms` milliseconds of a clock (a wall clock's milliseconds since the epoch).
    pub const fn millis(now_ms: u64) -> Self {
        Clock {
            now: now_ms,
            tick_ns: 1_000_000,
        }
    }

    /// `now_ns` nanoseconds of a clock (a monotonic clock's nanoseconds since some start).
    pub const fn nanos(now_ns: u64) -> Self {
        Clock {
            now: now_ns,
            tick_ns: 1,
        }
    }

    /// The instant, in ticks.
    pub const fn now(self) -> u64 {
        self.now
    }

    /// `ms` milliseconds in ticks.
    pub const fn ticks(self, ms: u64) -> u64 {
        ms.saturating_mul(1_000_000 / self.tick_ns)
    }

    /// The instant `ms` milliseconds from now, in ticks.
    pub const fn after(self, ms: u64) -> u64 {
        self.now.saturating_add(self.ticks(ms))
    }

    /// How long until `at` (zero when it has passed).
    pub fn until(self, at: u64) -> Duration {
        Duration::from_nanos(at.saturating_sub(self.now).saturating_mul(self.tick_ns))
    }
}

/// What a backend stores for a key, whatever its encoding. `T` is how the backend stores the
/// owner token (the [`Token`](crate::Token) itself, its hex, a digest), `H` the holder info
/// ([`HolderInfo`], or its JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<T, H> {
    /// The key's last fencing token: kept while the record is free or cooling, so that the
    /// next acquisition issues a higher one.
    pub fencing: u64,
    /// Held, cooling or free.
    pub state: State<T, H>,
}

/// The state part of a [`Record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State<T, H> {
    /// Released: the record only remembers the fencing token.
    Free,
    /// Released with a delay: every obtain is busy until `until`.
    Cooling {
        /// End of the cooldown, in ticks.
        until: u64,
    },
    /// Held by `token` (live until `expires`, then expired).
    Held(Hold<T, H>),
}

/// A held record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold<T, H> {
    /// The holder's owner token, as the backend stores it.
    pub token: T,
    /// The holder's info, as the backend stores it.
    pub holder: H,
    /// The reentrant hold count, at least 1.
    pub holds: u32,
    /// End of the ttl, in ticks.
    pub expires: u64,
    /// End of the grace period, in ticks: until then a late prolong or release by `token`
    /// is told apart from a lost one; after it the record counts as free.
    pub forget: u64,
}

/// The outcome of a decision and the record to write (`None`: write nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<O, T, H> {
    /// What the caller is told.
    pub outcome: O,
    /// What the backend stores for the key afterwards; `None` leaves the record as it is.
    pub write: Option<Record<T, H>>,
}

impl<O, T, H> Decision<O, T, H> {
    /// Whether the write ends a hold (a release, a forced release): waiters of the key
    /// should be woken.
    pub fn frees(&self) -> bool {
        matches!(&self.write, Some(r) if !matches!(r.state, State::Held(_)))
    }
}

/// An obtain request.
#[derive(Debug, Clone, Copy)]
pub struct Obtain<'a, T, H> {
    /// The caller's owner token, as the backend stores it.
    pub token: &'a T,
    /// The caller's holder info, as the backend stores it.
    pub holder: &'a H,
    /// How long the lock is to be held.
    pub ttl: Ttl,
    /// How long an expired record is kept to tell late calls from lost ones.
    pub grace: Grace,
    /// The lowest fencing token a fresh acquisition may issue: the backend's clock in
    /// microseconds (so tokens keep growing after the record is lost), or one above a
    /// counter that outlives records.
    pub fencing_floor: u64,
}

/// An obtain's outcome; `H` is the stored holder info, turned into [`HolderInfo`] by
/// [`Obtained::into_outcome`] or [`Obtained::try_into_outcome`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Obtained<'r, H> {
    /// See [`ObtainOutcome::Acquired`].
    Acquired {
        /// The fencing token issued.
        fencing: Fencing,
    },
    /// See [`ObtainOutcome::Reacquired`].
    Reacquired {
        /// The hold count now.
        holds: u32,
    },
    /// See [`ObtainOutcome::Busy`].
    Busy {
        /// The stored holder info of the holder; `None` during a cooldown.
        holder: Option<&'r H>,
        /// The holder's remaining ttl, or the remaining cooldown.
        remaining: Duration,
    },
}

impl<H> Obtained<'_, H> {
    /// The outcome, decoding the stored holder info with `decode` (which may find it
    /// corrupt).
    ///
    /// # Errors
    /// Whatever `decode` returns.
    pub fn try_into_outcome<E>(
        self,
        ttl: Ttl,
        decode: impl FnOnce(&H) -> Result<HolderInfo, E>,
    ) -> Result<ObtainOutcome, E> {
        Ok(match self {
            Obtained::Acquired { fencing } => ObtainOutcome::Acquired { fencing, ttl },
            Obtained::Reacquired { holds } => ObtainOutcome::Reacquired { holds },
            Obtained::Busy { holder, remaining } => ObtainOutcome::Busy(Busy {
                holder: holder.map(decode).transpose()?,
                remaining,
            }),
        })
    }
}

impl Obtained<'_, HolderInfo> {
    /// The outcome, for a backend that stores [`HolderInfo`] itself.
    pub fn into_outcome(self, ttl: Ttl) -> ObtainOutcome {
        let decoded = self.try_into_outcome(ttl, |h| Ok::<_, std::convert::Infallible>(h.clone()));
        match decoded {
            Ok(outcome) => outcome,
            Err(never) => match never {},
        }
    }
}

/// What an observer sees: [`LockState`] with the holder info as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum View<'r, H> {
    /// See [`LockState::Free`].
    Free,
    /// See [`LockState::Cooling`].
    Cooling {
        /// The remaining cooldown.
        remaining: Duration,
    },
    /// See [`LockState::Held`].
    Held {
        /// The stored holder info.
        holder: &'r H,
        /// The holder's fencing token.
        fencing: Fencing,
        /// The remaining ttl.
        remaining: Duration,
        /// The hold count.
        holds: u32,
    },
}

impl<H> View<'_, H> {
    /// The state, decoding the stored holder info with `decode`.
    ///
    /// # Errors
    /// Whatever `decode` returns.
    pub fn try_into_state<E>(
        self,
        decode: impl FnOnce(&H) -> Result<HolderInfo, E>,
    ) -> Result<LockState, E> {
        Ok(match self {
            View::Free => LockState::Free,
            View::Cooling { remaining } => LockState::Cooling { remaining },
            View::Held {
                holder,
                fencing,
                remaining,
                holds,
            } => LockState::Held {
                holder: decode(holder)?,
                fencing,
                remaining,
                holds,
            },
        })
    }
}

impl View<'_, HolderInfo> {
    /// The state, for a backend that stores [`HolderInfo`] itself.
    pub fn into_state(self) -> LockState {
        match self.try_into_state(|h| Ok::<_, std::convert::Infallible>(h.clone())) {
            Ok(state) => state,
            Err(never) => match never {},
        }
    }
}

/// Where a record stands at one instant.
enum Phase<'r, T, H> {
    /// No record, a free one, or one past its grace period (or its cooldown).
    Free,
    Cooling {
        until: u64,
    },
    Live(&'r Hold<T, H>),
    Expired(&'r Hold<T, H>),
}

fn phase<T, H>(record: Option<&Record<T, H>>, clock: Clock) -> Phase<'_, T, H> {
    let now = clock.now();
    match record.map(|r| &r.state) {
        None | Some(State::Free) => Phase::Free,
        Some(State::Cooling { until }) if *until > now => Phase::Cooling { until: *until },
        Some(State::Cooling { .. }) => Phase::Free,
        Some(State::Held(h)) if h.forget <= now => Phase::Free,
        Some(State::Held(h)) if h.expires > now => Phase::Live(h),
        Some(State::Held(h)) => Phase::Expired(h),
    }
}

/// Whether `record` says no more than a missing record would (free, past its grace period,
/// or its cooldown over), apart from its fencing token: a backend that keeps fencing
/// elsewhere may delete it.
pub fn forgotten<T, H>(record: &Record<T, H>, clock: Clock) -> bool {
    matches!(phase(Some(record), clock), Phase::Free)
}

/// The key's last fencing token (0 without a record).
fn last_fencing<T, H>(record: Option<&Record<T, H>>) -> u64 {
    record.map_or(0, |r| r.fencing)
}

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

/// Decides an obtain.
///
/// - Cooling: `Busy` with no holder and the remaining cooldown.
/// - Live and `token`'s: `Reacquired`, one more hold, the ttl reset, the fencing kept.
/// - Live and another's: `Busy` with the holder and its remaining ttl.
/// - Free, expired (whoever held it) or past its grace: `Acquired` with one hold and the
///   fencing token `max(last + 1, fencing_floor)`.
pub fn obtain<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
    ask: Obtain<'_, T, H>,
) -> Decision<Obtained<'r, H>, T, H> {
    match phase(record, clock) {
        Phase::Cooling { until } => Decision {
            outcome: Obtained::Busy {
                holder: None,
                remaining: clock.until(until),
            },
            write: None,
        },
        Phase::Live(hold) if hold.token == *ask.token => {
            let holds = hold.holds.saturating_add(1);
            let next = Hold {
                holds,
                ..renewed(hold, clock, ask.ttl, ask.grace)
            };
            Decision {
                outcome: Obtained::Reacquired { holds },
                write: Some(Record {
                    fencing: last_fencing(record),
                    state: State::Held(next),
                }),
            }
        }
        Phase::Live(hold) => Decision {
            outcome: Obtained::Busy {
                holder: Some(&hold.holder),
                remaining: clock.until(hold.expires),
            },
            write: None,
        },
        Phase::Free | Phase::Expired(_) => {
            let fencing = last_fencing(record)
                .saturating_add(1)
                .max(ask.fencing_floor);
            let (expires, forget) = hold_times(clock, ask.ttl, ask.grace);
            let hold = Hold {
                token: ask.token.clone(),
                holder: ask.holder.clone(),
                holds: 1,
                expires,
                forget,
            };
            Decision {
                outcome: Obtained::Acquired {
                    fencing: Fencing(fencing),
                },
                write: Some(Record {
                    fencing,
                    state: State::Held(hold),
                }),
            }
        }
    }
}

/// Decides a prolong: `Prolonged` when `token` holds it live, `ProlongedLate` when its hold
/// expired but is within its grace (nobody took it since), else `Lost` and nothing written.
/// The hold count and the fencing token are kept.
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
        _ => return nothing(ProlongOutcome::Lost),
    };
    Decision {
        outcome,
        write: Some(Record {
            fencing: last_fencing(record),
            state: State::Held(renewed(hold, clock, ttl, grace)),
        }),
    }
}

/// Decides a release: `Decremented` when `token` holds it live more than once (the expiry
/// kept, `delay` ignored); `Released` when it holds it live once, `ReleasedLate` when its
/// hold expired within the grace (whatever the hold count): the record becomes free, or
/// cooling for `delay`. Anything else is `Lost` and nothing is written.
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
                write: Some(Record {
                    fencing: last_fencing(record),
                    state: State::Held(Hold { holds, ..h.clone() }),
                }),
            };
        }
        Phase::Live(h) if h.token == *token => ReleaseOutcome::Released,
        Phase::Expired(h) if h.token == *token => ReleaseOutcome::ReleasedLate,
        _ => return nothing(ReleaseOutcome::Lost),
    };
    Decision {
        outcome,
        write: Some(freed(record, clock, delay)),
    }
}

/// What an observer sees: an expired record reads as free.
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
    }
}

/// Breaks the lock whoever holds it: the outcome is what it was, the record becomes free
/// (keeping its fencing token). Nothing stored: nothing written.
pub fn force<'r, T: Clone, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
) -> Decision<View<'r, H>, T, H> {
    Decision {
        outcome: view(record, clock),
        write: record.map(|_| freed(record, clock, None)),
    }
}

/// The record of a released lock: free, or cooling for `delay`, with its fencing token.
fn freed<T, H>(record: Option<&Record<T, H>>, clock: Clock, delay: Option<Ttl>) -> Record<T, H> {
    Record {
        fencing: last_fencing(record),
        state: match delay {
            Some(d) => State::Cooling {
                until: clock.after(d.as_millis()),
            },
            None => State::Free,
        },
    }
}

fn nothing<O, T, H>(outcome: O) -> Decision<O, T, H> {
    Decision {
        outcome,
        write: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_never_goes_below_the_floor_nor_the_last_token() {
        let ttl = Ttl::from_millis(1).unwrap();
        let grace = Grace::or_ttl(None, ttl);
        let free: Record<u8, ()> = Record {
            fencing: 50,
            state: State::Free,
        };
        for (record, floor, want) in [(None, 10, 10), (Some(&free), 10, 51), (Some(&free), 90, 90)]
        {
            let ask = Obtain {
                token: &1,
                holder: &(),
                ttl,
                grace,
                fencing_floor: floor,
            };
            let got = obtain(record, Clock::millis(0), ask).outcome;
            assert_eq!(
                got,
                Obtained::Acquired {
                    fencing: Fencing(want)
                }
            );
        }
    }
}
