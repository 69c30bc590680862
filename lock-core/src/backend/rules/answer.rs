//! What a decision answers: the request it decides, the outcome with the record to write and
//! the waiters to wake, and what an observer sees.

use std::time::Duration;

use super::Record;
use crate::{
    Busy, BusyReason, Error, ErrorKind, Fencing, Grace, HolderInfo, LockState, Mode, ObtainOutcome,
    Operation, SharedHold, Ttl,
};

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

/// An obtain request. Copied freely whatever `T` and `H` are: it only borrows them.
#[derive(Debug)]
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
    /// The caller waits and will ask again: an exclusive request that is busy because of
    /// shared holds leaves a writer's marker for `ttl`, which keeps new shared holds out until
    /// the caller obtains, gives up (a release by its token) or stops asking.
    pub queue: bool,
    /// A mode change of the caller's own hold with this fencing token (a live share, for
    /// an exclusive request; the live exclusive hold, for a shared one). Without that hold
    /// the answer is [`Obtained::Lost`] and nothing is written: a share that is gone must
    /// not become the write lock as if nobody had held the key in between. `None`: an
    /// ordinary obtain, which still changes the token's live hold in the other mode (the
    /// contract's "Mode changes") but grants afresh when there is none.
    pub change: Option<u64>,
}

impl<T, H> Clone for Obtain<'_, T, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, H> Copy for Obtain<'_, T, H> {}

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
    /// The mode itself is invalid (no permits, or a weight outside 1 ..= capacity).
    Invalid(Mode),
    /// A mode change of a hold its token took more than once (reentrant holds): they must
    /// be given back first.
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
            Refusal::Invalid(mode) => mode.problem().unwrap_or_else(|| mode.to_string()),
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
                "this token holds the key ({held}) more than once; give back its reentrant \
                 holds before changing its mode"
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
    /// See [`ObtainOutcome::Lost`]: a mode change ([`Obtain::change`]) whose hold is gone.
    Lost,
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
            Obtained::Lost => ObtainOutcome::Lost,
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
