//! The vocabulary of the rules' one entry: every operation on one key as one request
//! ([`Ask`]), decided by one pure function (`rules::step`) into one answer ([`Answer`]) and
//! the record to write; the answer said in the public vocabulary is a [`Reply`].
//!
//! A backend that decides in Rust needs nothing else: read the record and the clock under
//! whatever makes the step atomic, call `rules::step`, store `Decision::write`, wake
//! `Decision::wake`, and hand [`Answer::try_into_reply`] to the caller. The storage
//! adapter (`backend::storage`) does exactly that for any storage.

use super::answer::{Decision, Obtain, Obtained, View, Wake};
use super::{force, obtain, prolong, release, view, Clock, Record};
use crate::{
    Error, ErrorKind, Grace, HolderInfo, LockState, ObtainOutcome, Operation, ProlongOutcome,
    ReleaseOutcome, Ttl,
};

/// One request on one key: `T` is the owner token and `H` the holder info, as the backend
/// stores them. Copied freely: it only borrows them.
#[derive(Debug)]
pub enum Ask<'a, T, H> {
    /// Take the key (either mode, a mode change, queueing or not); see `rules::obtain`.
    Obtain(Obtain<'a, T, H>),
    /// Renew the token's hold for `ttl` from now; see `rules::prolong`.
    Prolong {
        /// The owner.
        token: &'a T,
        /// The new ttl.
        ttl: Ttl,
        /// How long the renewed hold is remembered after it expires.
        grace: Grace,
    },
    /// Give back one of the token's holds, cooling down for `delay` if that frees the key;
    /// see `rules::release`.
    Release {
        /// The owner.
        token: &'a T,
        /// The cooldown after a release that frees the key.
        delay: Option<Ttl>,
    },
    /// What an observer sees; writes nothing. See `rules::view`.
    Inspect,
    /// Break whatever holds the key, for an operator; see `rules::force`.
    Force,
}

impl<T, H> Clone for Ask<'_, T, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, H> Copy for Ask<'_, T, H> {}

impl<T, H> Ask<'_, T, H> {
    /// The operation this request is, for errors and spans.
    pub fn operation(&self) -> Operation {
        match self {
            Ask::Obtain(_) => Operation::Obtain,
            Ask::Prolong { .. } => Operation::Prolongate,
            Ask::Release { .. } => Operation::Release,
            Ask::Inspect => Operation::Inspect,
            Ask::Force => Operation::ForceRelease,
        }
    }

    /// Whether the request can write: all but [`Ask::Inspect`]. A storage may read an
    /// inspection without the lock a write needs (a shared `flock`, no row lock).
    pub fn writes(&self) -> bool {
        !matches!(self, Ask::Inspect)
    }
}

/// The step's answer, holder info as stored (`H`), borrowed from the record it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<'r, H> {
    /// An obtain's outcome, with the ttl it asked for (an acquisition's validity).
    Obtain(Obtained<'r, H>, Ttl),
    /// A prolong's outcome.
    Prolong(ProlongOutcome),
    /// A release's outcome.
    Release(ReleaseOutcome),
    /// The state seen (an inspection) or broken (a forced release).
    State(View<'r, H>),
}

impl<H> Answer<'_, H> {
    /// The answer in the public vocabulary, decoding stored holder info with `decode`
    /// (which may find it corrupt); a refused obtain becomes `backend`'s
    /// [`ErrorKind::InvalidInput`].
    ///
    /// # Errors
    /// Whatever `decode` returns, and the refusal.
    pub fn try_into_reply<E: From<Error>>(
        self,
        backend: &'static str,
        decode: impl FnMut(&H) -> Result<HolderInfo, E>,
    ) -> Result<Reply, E> {
        Ok(match self {
            Answer::Obtain(outcome, ttl) => {
                let mut decode = decode;
                Reply::Obtain(outcome.try_into_outcome(ttl, backend, &mut decode)?)
            }
            Answer::Prolong(outcome) => Reply::Prolong(outcome),
            Answer::Release(outcome) => Reply::Release(outcome),
            Answer::State(view) => Reply::State(view.try_into_state(decode)?),
        })
    }
}

/// An answer in the one outcome vocabulary every backend speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// See [`LockBackend::obtain`](crate::LockBackend::obtain).
    Obtain(ObtainOutcome),
    /// See [`LockBackend::prolongate`](crate::LockBackend::prolongate).
    Prolong(ProlongOutcome),
    /// See [`LockBackend::release`](crate::LockBackend::release).
    Release(ReleaseOutcome),
    /// See [`LockBackend::inspect`](crate::LockBackend::inspect) and
    /// [`LockBackend::force_release`](crate::LockBackend::force_release).
    State(LockState),
}

impl Reply {
    /// The obtain's outcome.
    ///
    /// # Errors
    /// [`ErrorKind::Protocol`] when the reply answers another operation.
    pub fn into_obtain(self, backend: &'static str) -> crate::Result<ObtainOutcome> {
        match self {
            Reply::Obtain(o) => Ok(o),
            other => Err(other.mismatch(backend, Operation::Obtain)),
        }
    }

    /// The prolong's outcome.
    ///
    /// # Errors
    /// [`ErrorKind::Protocol`] when the reply answers another operation.
    pub fn into_prolong(self, backend: &'static str) -> crate::Result<ProlongOutcome> {
        match self {
            Reply::Prolong(o) => Ok(o),
            other => Err(other.mismatch(backend, Operation::Prolongate)),
        }
    }

    /// The release's outcome.
    ///
    /// # Errors
    /// [`ErrorKind::Protocol`] when the reply answers another operation.
    pub fn into_release(self, backend: &'static str) -> crate::Result<ReleaseOutcome> {
        match self {
            Reply::Release(o) => Ok(o),
            other => Err(other.mismatch(backend, Operation::Release)),
        }
    }

    /// The state seen or broken (`op`: [`Operation::Inspect`] or
    /// [`Operation::ForceRelease`]).
    ///
    /// # Errors
    /// [`ErrorKind::Protocol`] when the reply answers another operation.
    pub fn into_state(self, backend: &'static str, op: Operation) -> crate::Result<LockState> {
        match self {
            Reply::State(s) => Ok(s),
            other => Err(other.mismatch(backend, op)),
        }
    }

    fn mismatch(&self, backend: &'static str, op: Operation) -> Error {
        Error::new(
            ErrorKind::Protocol,
            backend,
            op,
            format!("the backend answered {self:?} to {op}"),
        )
    }
}

/// Decides `ask` on `record` at `clock`: the one entry every operation goes through.
///
/// ```
/// use lock_core::backend::rules::{step, Answer, Ask, Clock};
/// use lock_core::{ReleaseOutcome, Ttl};
///
/// // Releasing a key nobody holds: `Lost`, nothing written, nobody woken.
/// let d = step::<u32, &str>(None, Clock::millis(1_000), Ask::Release { token: &7, delay: None });
/// assert_eq!(d.outcome, Answer::Release(ReleaseOutcome::Lost));
/// assert!(d.write.is_none() && !d.frees());
/// ```
pub fn step<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
    ask: Ask<'_, T, H>,
) -> Decision<Answer<'r, H>, T, H> {
    match ask {
        Ask::Obtain(o) => obtain(record, clock, o).map(|outcome| Answer::Obtain(outcome, o.ttl)),
        Ask::Prolong { token, ttl, grace } => {
            prolong(record, clock, token, ttl, grace).map(Answer::Prolong)
        }
        Ask::Release { token, delay } => release(record, clock, token, delay).map(Answer::Release),
        Ask::Inspect => Decision {
            outcome: Answer::State(view(record, clock)),
            write: None,
            wake: Wake::Nobody,
        },
        Ask::Force => force(record, clock).map(Answer::State),
    }
}
