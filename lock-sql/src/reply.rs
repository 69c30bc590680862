//! What a server-side lock routine answers (Postgres's function, MariaDB's procedure): one
//! row of an outcome word and the values the outcome needs, decoded by each backend from
//! its own row type into a [`Reply`] and turned here into the contract's outcomes, so that
//! both backends speak one vocabulary.

use std::time::Duration;

use lock_core::{
    Busy, Error, Fencing, HolderInfo, LockState, ObtainOutcome, Operation, ProlongOutcome,
    ReleaseOutcome, Result, Ttl,
};

use lock_core::backend::codec::DigestJson;
use lock_core::backend::routine::Verdict;
use lock_core::backend::rules::{self, Ask};

use crate::errors::protocol;

/// A routine's outcome word, decoded once: a word the routine never writes is a protocol
/// error where the row is read, not a string compared further on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word {
    /// `acquired`: a fresh hold, with its fencing token.
    Acquired,
    /// `reacquired`: the same token's hold, counted once more.
    Reacquired,
    /// `busy`: held by another (with its holder), or cooling down (without).
    Busy,
    /// `prolonged`: within its ttl.
    Prolonged,
    /// `prolonged_late`: past its ttl, within its grace period, nobody else in between.
    ProlongedLate,
    /// `released`: within its ttl.
    Released,
    /// `released_late`: past its ttl, within its grace period.
    ReleasedLate,
    /// `decremented`: a reentrant hold counted down, still held.
    Decremented,
    /// `lost`: the token holds nothing there any more.
    Lost,
    /// `free` (inspect, force).
    Free,
    /// `cooling` (inspect, force).
    Cooling,
    /// `held` (inspect, force).
    Held,
    /// The row holds shares, a live writer's marker, or something the routine does not
    /// decide: it wrote nothing, and the client decides with lock-core's rules.
    Defer,
    /// The session's settings need pinning before the routine can run (Postgres).
    Settings,
    /// A sweep's count of deleted rows (Postgres).
    Swept,
    /// A waiter's listing made or renewed (Postgres, `p_op` `wait`).
    Wait,
    /// A waiter's listing taken out (Postgres, `p_op` `unwait`).
    Unwait,
}

impl Word {
    /// The word as the routine writes it, or `None` for any other text.
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "acquired" => Word::Acquired,
            "reacquired" => Word::Reacquired,
            "busy" => Word::Busy,
            "prolonged" => Word::Prolonged,
            "prolonged_late" => Word::ProlongedLate,
            "released" => Word::Released,
            "released_late" => Word::ReleasedLate,
            "decremented" => Word::Decremented,
            "lost" => Word::Lost,
            "free" => Word::Free,
            "cooling" => Word::Cooling,
            "held" => Word::Held,
            "defer" => Word::Defer,
            "settings" => Word::Settings,
            "swept" => Word::Swept,
            "wait" => Word::Wait,
            "unwait" => Word::Unwait,
            _ => return None,
        })
    }
}

/// One row of a routine's answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The backend's name, for errors.
    pub backend: &'static str,
    /// The operation that was asked.
    pub op: Operation,
    /// The outcome.
    pub outcome: Word,
    /// What remains of the hold or the cooldown (`busy`, `held`, `cooling`), or a sweep's
    /// count in milliseconds' place (Postgres's `swept`).
    pub remaining: Option<Duration>,
    /// The holder, as the JSON the row stores.
    pub holder: Option<String>,
    /// The fencing token (`acquired`, `held`).
    pub fencing: Option<i64>,
    /// The hold count (`reacquired`, `decremented`, `held`).
    pub holds: Option<i64>,
}

impl Reply {
    /// A reply of `word`, which must be one the routine writes.
    ///
    /// # Errors
    /// A protocol error naming the word when it is none of [`Word`]'s.
    pub fn new(backend: &'static str, op: Operation, word: &str) -> Result<Self> {
        let outcome = Word::parse(word).ok_or_else(|| {
            protocol(
                backend,
                op,
                format!("the routine answered outcome {word:?}"),
            )
        })?;
        Ok(Reply {
            backend,
            op,
            outcome,
            remaining: None,
            holder: None,
            fencing: None,
            holds: None,
        })
    }

    /// The error for an outcome (or a missing value) the operation cannot have.
    pub fn unexpected(&self) -> Error {
        protocol(self.backend, self.op, format!("outcome {:?}", self.outcome))
    }

    /// The routine's answer to `ask` as lock-core's routine kit takes it: the outcome of
    /// the operation asked, or [`Verdict::Defer`] for `defer`.
    ///
    /// # Errors
    /// A word that answers another operation, or a value the outcome needs missing
    /// ([`ErrorKind::Protocol`](lock_core::ErrorKind::Protocol)); a holder that cannot be
    /// read ([`ErrorKind::Corrupt`](lock_core::ErrorKind::Corrupt)).
    pub fn verdict<T, H>(&self, ask: &Ask<'_, T, H>) -> Result<Verdict<rules::Reply>> {
        if self.outcome == Word::Defer {
            return Ok(Verdict::Defer);
        }
        Ok(Verdict::Decided(match ask {
            Ask::Obtain(o) => rules::Reply::Obtain(self.obtain_outcome(o.ttl)?),
            Ask::Prolong { .. } => rules::Reply::Prolong(self.prolong_outcome()?),
            Ask::Release { .. } => rules::Reply::Release(self.release_outcome()?),
            Ask::Inspect | Ask::Force => rules::Reply::State(self.state()?),
        }))
    }

    /// An obtain's outcome, for a request of `ttl`. Not for [`Word::Defer`].
    ///
    /// # Errors
    /// A protocol error for an outcome an obtain cannot have, or a value it lacks.
    pub fn obtain_outcome(&self, ttl: Ttl) -> Result<ObtainOutcome> {
        match self.outcome {
            Word::Acquired => Ok(ObtainOutcome::Acquired {
                fencing: self.fencing()?,
                ttl,
            }),
            Word::Reacquired => Ok(ObtainOutcome::Reacquired {
                holds: self.holds()?,
            }),
            Word::Busy => Ok(ObtainOutcome::Busy(match self.holder()? {
                Some(holder) => Busy::held(holder, self.remaining()?),
                None => Busy::cooling(self.remaining()?),
            })),
            _ => Err(self.unexpected()),
        }
    }

    /// A prolong's outcome. Not for [`Word::Defer`].
    ///
    /// # Errors
    /// A protocol error for an outcome a prolong cannot have.
    pub fn prolong_outcome(&self) -> Result<ProlongOutcome> {
        match self.outcome {
            Word::Prolonged => Ok(ProlongOutcome::Prolonged),
            Word::ProlongedLate => Ok(ProlongOutcome::ProlongedLate),
            Word::Lost => Ok(ProlongOutcome::Lost),
            _ => Err(self.unexpected()),
        }
    }

    /// A release's outcome. Not for [`Word::Defer`].
    ///
    /// # Errors
    /// A protocol error for an outcome a release cannot have, or a value it lacks.
    pub fn release_outcome(&self) -> Result<ReleaseOutcome> {
        match self.outcome {
            Word::Released => Ok(ReleaseOutcome::Released),
            Word::ReleasedLate => Ok(ReleaseOutcome::ReleasedLate),
            Word::Decremented => Ok(ReleaseOutcome::Decremented {
                holds: self.holds()?,
            }),
            Word::Lost => Ok(ReleaseOutcome::Lost),
            _ => Err(self.unexpected()),
        }
    }

    /// An inspect's or a force release's answer: the state before it. Not for
    /// [`Word::Defer`].
    ///
    /// # Errors
    /// A protocol error for another outcome, or a value it lacks.
    pub fn state(&self) -> Result<LockState> {
        match self.outcome {
            Word::Free => Ok(LockState::Free),
            Word::Cooling => Ok(LockState::Cooling {
                remaining: self.remaining()?,
            }),
            Word::Held => Ok(LockState::Held {
                holder: self.holder()?.ok_or_else(|| self.unexpected())?,
                fencing: self.fencing()?,
                remaining: self.remaining()?,
                holds: self.holds()?,
            }),
            _ => Err(self.unexpected()),
        }
    }

    /// What remains (of a hold or a cooldown).
    ///
    /// # Errors
    /// A protocol error when the routine sent none.
    pub fn remaining(&self) -> Result<Duration> {
        self.remaining.ok_or_else(|| self.unexpected())
    }

    /// The fencing token.
    ///
    /// # Errors
    /// A protocol error when the routine sent none, or a negative one.
    pub fn fencing(&self) -> Result<Fencing> {
        let f = self.fencing.ok_or_else(|| self.unexpected())?;
        u64::try_from(f).map(Fencing).map_err(|_| self.unexpected())
    }

    /// The hold count.
    ///
    /// # Errors
    /// A protocol error when the routine sent none, or one out of range.
    pub fn holds(&self) -> Result<u32> {
        let h = self.holds.ok_or_else(|| self.unexpected())?;
        u32::try_from(h).map_err(|_| self.unexpected())
    }

    /// The holder, if the routine sent one.
    ///
    /// # Errors
    /// A corrupt-data error when its JSON is not a holder's.
    pub fn holder(&self) -> Result<Option<HolderInfo>> {
        self.holder
            .as_deref()
            .map(|json| DigestJson::decode(self.backend, json, self.op))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::BusyReason;

    #[test]
    fn words_decode_and_outcomes_need_their_values() {
        assert_eq!(Word::parse("bogus"), None);
        assert_eq!(Word::parse(""), None);
        let err = Reply::new("x", Operation::Obtain, "bogus").unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
        let ttl = Ttl::from_millis(1000).unwrap();
        let mut r = Reply::new("x", Operation::Obtain, "acquired").unwrap();
        assert!(r.obtain_outcome(ttl).is_err(), "no fencing");
        r.fencing = Some(7);
        assert_eq!(
            r.obtain_outcome(ttl).unwrap(),
            ObtainOutcome::Acquired {
                fencing: Fencing(7),
                ttl
            }
        );
        assert!(r.release_outcome().is_err(), "not a release's outcome");
        let mut r = Reply::new("x", Operation::Obtain, "busy").unwrap();
        r.remaining = Some(Duration::from_millis(5));
        match r.obtain_outcome(ttl).unwrap() {
            ObtainOutcome::Busy(busy) => assert_eq!(busy.reason, BusyReason::Cooling),
            other => panic!("{other:?}"),
        }
        let mut r = Reply::new("x", Operation::Release, "decremented").unwrap();
        r.holds = Some(-1);
        assert!(r.release_outcome().is_err(), "a negative count");
    }
}
