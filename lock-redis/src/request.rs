//! One operation of the contract as both variants receive it, and its answer.

use lock_core::backend::{Grace, Token};
use lock_core::{HolderInfo, Mode, Operation, Result, Ttl};

use crate::error::corrupt;

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

/// The answer, in the one outcome vocabulary every backend speaks.
pub(crate) use lock_core::backend::rules::Reply;

/// Holder info as both variants store it in the record: JSON. Unreadable JSON is `Corrupt`.
pub(crate) fn parse_holder(backend: &'static str, op: Operation, json: &str) -> Result<HolderInfo> {
    serde_json::from_str(json).map_err(|e| {
        corrupt(
            backend,
            op,
            format!("the record's holder field is not holder info ({e})"),
        )
    })
}
