//! The contract's decisions for one lock, written once: a pure function of the stored record,
//! the time and the request, giving the outcome and the record to write.
//!
//! Shared holds (semaphores, read locks, the writer's marker) are decided in the same
//! functions; their rules are in the `shared` module's docs and the contract.
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
//! use lock_core::{Mode, ObtainOutcome, Ttl};
//! use lock_core::backend::Grace;
//!
//! let ttl = Ttl::from_millis(30_000)?;
//! let now = Clock::millis(1_000_000);
//! // Nothing stored for the key: token 7 gets it, and the backend writes `decision.write`.
//! let ask = Obtain {
//!     token: &7u32, holder: &"me", ttl, grace: Grace::or_ttl(None, ttl), fencing_floor: 1,
//!     mode: Mode::Exclusive, queue: false,
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

use std::time::Duration;

mod shared;

pub use shared::{Share, Shared};

use crate::{
    Busy, BusyReason, Error, ErrorKind, Fencing, Grace, HolderInfo, LockState, Mode, ObtainOutcome,
    Operation, ProlongOutcome, ReleaseOutcome, SharedHold, Ttl,
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
/// owner token (the [`Token`](crate::backend::Token) itself, its hex, a digest), `H` the
/// holder info ([`HolderInfo`], or its JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<T, H> {
    /// The key's last fencing token: kept while the record is free or cooling, so that the
    /// next acquisition issues a higher one.
    pub fencing: u64,
    /// Held, shared, cooling or free.
    pub state: State<T, H>,
    /// A waiting writer's marker: while it lives, new shared holds stay out. Only an
    /// exclusive obtain that was busy and asked to queue ([`Obtain::queue`]) leaves one; a
    /// backend that keeps no shared holds never sees one.
    pub writer: Option<Writer<T>>,
}

impl<T, H> Record<T, H> {
    /// A record without a writer's marker.
    pub const fn new(fencing: u64, state: State<T, H>) -> Self {
        Record {
            fencing,
            state,
            writer: None,
        }
    }
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
    /// Held exclusively by `token` (live until `expires`, then expired).
    Held(Hold<T, H>),
    /// Held shared: a semaphore's permits or read holds.
    Shared(Shared<T, H>),
}

/// One token's hold: the exclusive holder, or one of a key's shared holds.
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
    /// is told apart from a lost one; after it the hold counts as gone.
    pub forget: u64,
}

/// A waiting writer's marker, in [`Record::writer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer<T> {
    /// The waiting writer's token.
    pub token: T,
    /// End of the marker, in ticks: the writer's request ttl after its last busy attempt.
    pub until: u64,
}

/// Whom a decision's write should wake among the key's waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Nobody: nothing was freed.
    Nobody,
    /// One waiter: an exclusive hold ended, one caller can take the key; or a shared
    /// hold was admitted, and the next in line may be a reader that gets in too (which
    /// then wakes the next, so readers behind a writer all wake in turn).
    One,
    /// Every waiter: shared holds or a writer's marker were involved, so several callers
    /// may get in (readers after a writer), or the one that can is not the first in line.
    All,
}

/// The outcome of a decision and the record to write (`None`: write nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<O, T, H> {
    /// What the caller is told.
    pub outcome: O,
    /// What the backend stores for the key afterwards; `None` leaves the record as it is.
    pub write: Option<Record<T, H>>,
    /// Whom to wake among the key's waiters once the write is stored.
    pub wake: Wake,
}

impl<O, T, H> Decision<O, T, H> {
    /// Whether the write frees room (a release, a forced release): waiters of the key
    /// should be woken.
    pub fn frees(&self) -> bool {
        self.wake != Wake::Nobody
    }

    /// The same decision with its outcome turned by `f`.
    pub fn map<P>(self, f: impl FnOnce(O) -> P) -> Decision<P, T, H> {
        Decision {
            outcome: f(self.outcome),
            write: self.write,
            wake: self.wake,
        }
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
    /// Exclusive, or shared with a capacity and a weight.
    pub mode: Mode,
    /// The caller waits and will ask again: an exclusive request that is busy leaves a
    /// writer's marker for `ttl`, which keeps new shared holds out until the caller
    /// obtains, gives up (a release by its token) or stops asking.
    pub queue: bool,
}

/// Why an obtain was refused as invalid, whatever the key's holders: it can never succeed
/// as asked. The backend answers it as [`ErrorKind::InvalidInput`] and writes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The key's shared holds have another capacity.
    Capacity {
        /// The key's capacity.
        stored: u32,
        /// The request's.
        asked: u32,
    },
    /// The caller's own live shared hold has another weight.
    Weight {
        /// The hold's weight.
        stored: u32,
        /// The request's.
        asked: u32,
    },
    /// The caller's token holds the key in the other mode.
    Mode {
        /// How the caller's token holds the key.
        held: Mode,
    },
}

impl Refusal {
    /// The refusal as the error a backend returns.
    pub fn into_error(self, backend: &'static str) -> Error {
        use crate::mode::Capacity;
        let msg = match self {
            Refusal::Capacity { stored, asked } => format!(
                "the key is held shared with capacity {}, not {}: every holder must ask \
                 for the same number of permits",
                Capacity(stored),
                Capacity(asked)
            ),
            Refusal::Weight { stored, asked } => format!(
                "this token holds the key with weight {stored}; a reentrant obtain must ask \
                 for the same weight, not {asked}"
            ),
            Refusal::Mode { held } => format!(
                "this token already holds the key ({held}); a reentrant obtain must ask for \
                 the same mode"
            ),
        };
        Error::new(ErrorKind::InvalidInput, backend, Operation::Obtain, msg)
    }
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
        /// The stored holder info of the hold whose end opens room; `None` during a
        /// cooldown or when only a writer's marker keeps the request out.
        holder: Option<&'r H>,
        /// When room can open for this request.
        remaining: Duration,
        /// What keeps the request out.
        reason: BusyReason,
        /// The key's live holds.
        holders: u32,
    },
    /// The request can never succeed as asked: an error, not contention.
    Refused(Refusal),
}

impl<H> Obtained<'_, H> {
    /// The outcome, decoding the stored holder info with `decode` (which may find it
    /// corrupt); a [`Obtained::Refused`] becomes `backend`'s
    /// [`ErrorKind::InvalidInput`].
    ///
    /// # Errors
    /// Whatever `decode` returns, and the refusal.
    pub fn try_into_outcome<E: From<Error>>(
        self,
        ttl: Ttl,
        backend: &'static str,
        decode: impl FnOnce(&H) -> Result<HolderInfo, E>,
    ) -> Result<ObtainOutcome, E> {
        Ok(match self {
            Obtained::Acquired { fencing } => ObtainOutcome::Acquired { fencing, ttl },
            Obtained::Reacquired { holds } => ObtainOutcome::Reacquired { holds },
            Obtained::Busy {
                holder,
                remaining,
                reason,
                holders,
            } => ObtainOutcome::Busy(Busy {
                holder: holder.map(decode).transpose()?,
                remaining,
                reason,
                holders,
            }),
            Obtained::Refused(refusal) => return Err(refusal.into_error(backend).into()),
        })
    }
}

impl Obtained<'_, HolderInfo> {
    /// The outcome, for a backend that stores [`HolderInfo`] itself.
    ///
    /// # Errors
    /// A refusal, as `backend`'s [`ErrorKind::InvalidInput`].
    pub fn into_outcome(self, ttl: Ttl, backend: &'static str) -> crate::Result<ObtainOutcome> {
        self.try_into_outcome(ttl, backend, |h| Ok::<_, Error>(h.clone()))
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
    /// See [`LockState::Shared`].
    Shared {
        /// The key's capacity.
        capacity: u32,
        /// Every live hold: holder, fencing, remaining, holds, weight.
        holds: Vec<(&'r H, Fencing, Duration, u32, u32)>,
        /// A waiting writer's remaining marker.
        writer_waiting: Option<Duration>,
    },
}

impl<H> View<'_, H> {
    /// The state, decoding the stored holder info with `decode`.
    ///
    /// # Errors
    /// Whatever `decode` returns.
    pub fn try_into_state<E>(
        self,
        mut decode: impl FnMut(&H) -> Result<HolderInfo, E>,
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
            View::Shared {
                capacity,
                holds,
                writer_waiting,
            } => LockState::Shared {
                capacity,
                holds: holds
                    .into_iter()
                    .map(|(holder, fencing, remaining, holds, weight)| {
                        Ok(SharedHold {
                            holder: decode(holder)?,
                            fencing,
                            remaining,
                            holds,
                            weight,
                        })
                    })
                    .collect::<Result<_, E>>()?,
                writer_waiting,
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
    /// Shared holds, at least one of them within its grace.
    Shared(&'r Shared<T, H>),
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
        Some(State::Shared(s)) if s.remembered(clock) => Phase::Shared(s),
        Some(State::Shared(_)) => Phase::Free,
    }
}

/// The live writer's marker of `record`, if any.
fn live_writer<T, H>(record: Option<&Record<T, H>>, clock: Clock) -> Option<&Writer<T>> {
    record
        .and_then(|r| r.writer.as_ref())
        .filter(|w| w.until > clock.now())
}

/// Whether `record` says no more than a missing record would (free, past its grace period,
/// or its cooldown over, and no writer waiting), apart from its fencing token: a backend
/// that keeps fencing elsewhere may delete it.
pub fn forgotten<T, H>(record: &Record<T, H>, clock: Clock) -> bool {
    matches!(phase(Some(record), clock), Phase::Free) && live_writer(Some(record), clock).is_none()
}

/// The key's last fencing token (0 without a record).
fn last_fencing<T, H>(record: Option<&Record<T, H>>) -> u64 {
    record.map_or(0, |r| r.fencing)
}

/// The fencing token of a fresh admission.
fn next_fencing<T, H>(record: Option<&Record<T, H>>, floor: u64) -> u64 {
    last_fencing(record).saturating_add(1).max(floor)
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
/// - Live and another's, or live shared holds: `Busy` with the holder whose end opens the
///   key and its remaining ttl; with [`Obtain::queue`], a writer's marker for `ttl` (unless
///   another writer's marker lives).
/// - Free, expired (whoever held it) or past its grace: `Acquired` with one hold and the
///   fencing token `max(last + 1, fencing_floor)`.
///
/// Shared: see [`Shared`]'s rules (in the module's docs).
pub fn obtain<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
    ask: Obtain<'_, T, H>,
) -> Decision<Obtained<'r, H>, T, H> {
    match ask.mode {
        Mode::Exclusive => obtain_exclusive(record, clock, ask),
        Mode::Shared { capacity, weight } => shared::obtain(record, clock, ask, capacity, weight),
    }
}

fn obtain_exclusive<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
    ask: Obtain<'_, T, H>,
) -> Decision<Obtained<'r, H>, T, H> {
    let busy = |hold: &'r Hold<T, H>, reason, holders| {
        let outcome = Obtained::Busy {
            holder: Some(&hold.holder),
            remaining: clock.until(hold.expires),
            reason,
            holders,
        };
        mark_writer(record, clock, &ask, outcome)
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
                write: Some(Record {
                    fencing: last_fencing(record),
                    state: State::Held(next),
                    writer: writer_after(record, clock, ask.token),
                }),
                wake: Wake::Nobody,
            }
        }
        Phase::Live(hold) => busy(hold, BusyReason::Held, 1),
        Phase::Shared(s) => {
            let live = s.live(clock);
            if let Some(own) = live.iter().find(|sh| sh.hold.token == *ask.token) {
                let held = Mode::Shared {
                    capacity: s.capacity,
                    weight: own.weight,
                };
                return nothing(Obtained::Refused(Refusal::Mode { held }));
            }
            match live.iter().max_by_key(|sh| sh.hold.expires) {
                Some(last) => busy(&last.hold, BusyReason::Shared, count(live.len())),
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
        write: Some(Record {
            state: State::Held(renewed(hold, clock, ttl, grace)),
            ..record_or_free(record)
        }),
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
                write: Some(Record {
                    state: State::Held(Hold { holds, ..h.clone() }),
                    ..record_or_free(record)
                }),
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

/// `record`, or a free record, to update with `..`.
fn record_or_free<T: Clone, H: Clone>(record: Option<&Record<T, H>>) -> Record<T, H> {
    record
        .cloned()
        .unwrap_or_else(|| Record::new(0, State::Free))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_never_goes_below_the_floor_nor_the_last_token() {
        let ttl = Ttl::from_millis(1).unwrap();
        let grace = Grace::or_ttl(None, ttl);
        let free: Record<u8, ()> = Record::new(50, State::Free);
        for (record, floor, want) in [(None, 10, 10), (Some(&free), 10, 51), (Some(&free), 90, 90)]
        {
            let ask = Obtain {
                token: &1,
                holder: &(),
                ttl,
                grace,
                fencing_floor: floor,
                mode: Mode::Exclusive,
                queue: false,
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

    fn ask(token: &u8, mode: Mode, queue: bool) -> Obtain<'_, u8, ()> {
        let ttl = Ttl::from_millis(1_000).unwrap();
        Obtain {
            token,
            holder: &(),
            ttl,
            grace: Grace::or_ttl(None, ttl),
            fencing_floor: 1,
            mode,
            queue,
        }
    }

    /// Applies `d`'s write to `record`; returns the outcome.
    fn apply<O>(record: &mut Option<Record<u8, ()>>, d: Decision<O, u8, ()>) -> O {
        if let Some(w) = d.write {
            *record = Some(w);
        }
        d.outcome
    }

    fn release_into(
        record: &mut Option<Record<u8, ()>>,
        at: u64,
        token: u8,
    ) -> (ReleaseOutcome, Wake) {
        let d = release(record.as_ref(), Clock::millis(at), &token, None);
        let wake = d.wake;
        (apply(record, d), wake)
    }

    fn obtain_into(
        record: &mut Option<Record<u8, ()>>,
        at: u64,
        token: u8,
        mode: Mode,
        queue: bool,
    ) -> String {
        let d = obtain(record.as_ref(), Clock::millis(at), ask(&token, mode, queue));
        let outcome = format!("{:?}", d.outcome);
        let write = d.write;
        if let Some(w) = write {
            *record = Some(w);
        }
        outcome
    }

    const SEM3: fn(u32) -> Mode = |w| Mode::Shared {
        capacity: 3,
        weight: w,
    };

    #[test]
    fn a_semaphore_admits_up_to_its_capacity() {
        let mut r = None;
        assert!(obtain_into(&mut r, 0, 1, SEM3(2), false).starts_with("Acquired"));
        assert!(obtain_into(&mut r, 0, 2, SEM3(1), false).starts_with("Acquired"));
        let full = obtain_into(&mut r, 10, 3, SEM3(1), false);
        assert!(
            full.contains("Full") && full.contains("holders: 2"),
            "{full}"
        );
        // The room opens when the first hold ends: both end at 1000, remaining 990 ms.
        assert!(full.contains("990ms"), "{full}");
        assert!(obtain_into(&mut r, 10, 3, SEM3(1), false).contains("Full"));
        let refused = obtain_into(
            &mut r,
            10,
            3,
            Mode::Shared {
                capacity: 4,
                weight: 1,
            },
            false,
        );
        assert!(
            refused.contains("Capacity { stored: 3, asked: 4 }"),
            "{refused}"
        );
        assert!(obtain_into(&mut r, 10, 2, SEM3(2), false).contains("Weight"));
        assert!(obtain_into(&mut r, 10, 2, SEM3(1), false).contains("Reacquired { holds: 2 }"));
        // Token 1 releases its two permits: token 3 gets in, with a higher fencing token.
        assert_eq!(release_into(&mut r, 20, 1).0, ReleaseOutcome::Released);
        assert!(
            obtain_into(&mut r, 20, 3, SEM3(1), false).contains("Acquired { fencing: Fencing(3) }")
        );
        // Every hold has its own lease: at 1000 token 2's holds end, token 3's (from 20) live.
        // Token 2's reentrant obtain at 10 renewed it to 1010; token 3's runs to 1020.
        let view = format!("{:?}", view(r.as_ref(), Clock::millis(1_012)));
        assert!(
            view.contains("holds: [((), Fencing(3), 8ms, 1, 1)]"),
            "{view}"
        );
    }

    #[test]
    fn readers_share_and_exclude_a_writer() {
        let mut r = None;
        assert!(obtain_into(&mut r, 0, 1, Mode::READ, false).starts_with("Acquired"));
        assert!(obtain_into(&mut r, 0, 2, Mode::READ, false).starts_with("Acquired"));
        let writer = obtain_into(&mut r, 0, 3, Mode::Exclusive, false);
        assert!(
            writer.contains("Shared") && writer.contains("holders: 2"),
            "{writer}"
        );
        assert!(obtain_into(&mut r, 0, 1, Mode::Exclusive, false).contains("Refused(Mode"));
        // Once both readers expire, the writer gets it, and their late calls are lost.
        assert!(obtain_into(&mut r, 1_000, 3, Mode::Exclusive, false).starts_with("Acquired"));
        let late = prolong(
            r.as_ref(),
            Clock::millis(1_001),
            &1,
            Ttl::from_millis(10).unwrap(),
            Grace::or_ttl(None, Ttl::from_millis(10).unwrap()),
        );
        assert_eq!(late.outcome, ProlongOutcome::Lost);
        let reader = obtain_into(&mut r, 1_001, 1, Mode::READ, false);
        assert!(
            reader.contains("Held") && reader.contains("holders: 1"),
            "{reader}"
        );
        assert!(obtain_into(&mut r, 1_001, 3, Mode::READ, false).contains("Refused(Mode"));
    }

    #[test]
    fn a_waiting_writer_keeps_new_readers_out() {
        let mut r = None;
        assert!(obtain_into(&mut r, 0, 1, Mode::READ, false).starts_with("Acquired"));
        // Without queueing, nothing is marked.
        assert!(obtain_into(&mut r, 0, 9, Mode::Exclusive, false).contains("Shared"));
        assert!(obtain_into(&mut r, 0, 2, Mode::READ, false).starts_with("Acquired"));
        // Queueing, the writer leaves its marker for its ttl.
        assert!(obtain_into(&mut r, 10, 9, Mode::Exclusive, true).contains("Shared"));
        let kept_out = obtain_into(&mut r, 10, 3, Mode::READ, false);
        assert!(
            kept_out.contains("WriterWaiting") && kept_out.contains("1s"),
            "{kept_out}"
        );
        // A second writer's queueing leaves the first one's marker alone.
        assert!(obtain_into(&mut r, 20, 8, Mode::Exclusive, true).contains("Shared"));
        assert_eq!(
            r.as_ref().and_then(|r| r.writer.as_ref()).map(|w| w.token),
            Some(9)
        );
        // Readers inside keep reentering; the marker outlives them; the writer gets in.
        assert!(obtain_into(&mut r, 20, 1, Mode::READ, false).contains("Reacquired"));
        for t in [1, 1, 2] {
            let _ = release_into(&mut r, 30, t);
        }
        assert!(obtain_into(&mut r, 30, 3, Mode::READ, false).contains("WriterWaiting"));
        assert!(obtain_into(&mut r, 40, 9, Mode::Exclusive, true).starts_with("Acquired"));
        assert_eq!(
            r.as_ref().and_then(|r| r.writer.as_ref()),
            None,
            "obtained: marker gone"
        );
        // One waiter is woken; a reader that gets in wakes the next, and so on.
        assert_eq!(
            release_into(&mut r, 50, 9),
            (ReleaseOutcome::Released, Wake::One)
        );
        let d = obtain(r.as_ref(), Clock::millis(50), ask(&3, Mode::READ, false));
        assert_eq!(
            d.wake,
            Wake::One,
            "a shared admission wakes the next in line"
        );
        r = d.write;
        // A writer that gives up takes its marker away; a dead one's lapses with its ttl.
        assert!(obtain_into(&mut r, 60, 9, Mode::Exclusive, true).contains("Shared"));
        assert_eq!(release_into(&mut r, 60, 9).0, ReleaseOutcome::Lost);
        assert!(obtain_into(&mut r, 60, 4, Mode::READ, false).starts_with("Acquired"));
        assert!(obtain_into(&mut r, 70, 9, Mode::Exclusive, true).contains("Shared"));
        assert!(obtain_into(&mut r, 1_069, 5, Mode::READ, false).contains("WriterWaiting"));
        assert!(obtain_into(&mut r, 1_070, 5, Mode::READ, false).starts_with("Acquired"));
    }

    #[test]
    fn an_expired_share_is_late_while_its_room_is_untaken() {
        let two = |w| Mode::Shared {
            capacity: 2,
            weight: w,
        };
        let mut r = None;
        let short = Ttl::from_millis(100).unwrap();
        let long = Ttl::from_millis(10_000).unwrap();
        let grace = Grace::or_ttl(None, long);
        let d = obtain(
            None,
            Clock::millis(0),
            Obtain {
                ttl: short,
                grace,
                ..ask(&1, two(1), false)
            },
        );
        let _ = apply(&mut r, d);
        assert!(obtain_into(&mut r, 200, 2, two(1), false).starts_with("Acquired"));
        let late = prolong(r.as_ref(), Clock::millis(300), &1, long, grace);
        assert_eq!(late.outcome, ProlongOutcome::ProlongedLate);
        let d = obtain(
            None,
            Clock::millis(0),
            Obtain {
                ttl: short,
                grace,
                ..ask(&1, two(1), false)
            },
        );
        let mut r2 = None;
        let _ = apply(&mut r2, d);
        assert!(
            obtain_into(&mut r2, 200, 2, two(2), false).starts_with("Acquired"),
            "1's room taken"
        );
        assert_eq!(
            prolong(r2.as_ref(), Clock::millis(300), &1, long, grace).outcome,
            ProlongOutcome::Lost
        );
        assert_eq!(
            release(r2.as_ref(), Clock::millis(300), &1, None).outcome,
            ReleaseOutcome::Lost
        );
    }
}
