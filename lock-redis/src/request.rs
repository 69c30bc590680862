//! One operation of the contract as both variants receive it, and its answer.

use lock_core::backend::{Grace, Token};
use lock_core::{LockState, Mode, ObtainOutcome, Operation, ProlongOutcome, ReleaseOutcome, Ttl};

/// What to do to one lock.
pub(crate) enum Request<'a> {
    Obtain {
        token: &'a Token,
        ttl: Ttl,
        grace: Grace,
        holder_json: &'a str,
        /// Exclusive, or shared.
        mode: Mode,
        /// Leave a writer's marker when busy.
        queue: bool,
        /// A mode change of the hold with this fencing token.
        change: Option<u64>,
    },
    Prolong {
        token: &'a Token,
        ttl: Ttl,
        grace: Grace,
    },
    Release {
        token: &'a Token,
        delay: Option<Ttl>,
    },
    Inspect,
    Force,
}

impl Request<'_> {
    pub(crate) fn operation(&self) -> Operation {
        match self {
            Request::Obtain { .. } => Operation::Obtain,
            Request::Prolong { .. } => Operation::Prolongate,
            Request::Release { .. } => Operation::Release,
            Request::Inspect => Operation::Inspect,
            Request::Force => Operation::ForceRelease,
        }
    }
}

/// The answer, in the one outcome vocabulary.
#[derive(Debug)]
pub(crate) enum Reply {
    Obtain(ObtainOutcome),
    Prolong(ProlongOutcome),
    Release(ReleaseOutcome),
    State(LockState),
}
