//! The function's answer: one row per operation, decoded into the contract's outcomes.

use std::time::Duration;

use lock_core::{Error, Fencing, LockState, Operation, ProlongOutcome, Result};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::protocol;
use crate::NAME;

/// The function's outcome word (`o_outcome` in `schema.sql`), decoded once: a word the
/// function never writes is a protocol error where the row is read, not a string compared
/// further on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Word {
    Acquired,
    Reacquired,
    Busy,
    Prolonged,
    ProlongedLate,
    Released,
    ReleasedLate,
    Decremented,
    Lost,
    Free,
    Cooling,
    Held,
    /// The row holds shares or a live writer's marker: the function wrote nothing, and the
    /// client decides (`shared.rs`).
    Defer,
    /// A call carried another table's settings than the function was made with.
    Settings,
    /// A sweep's count of deleted rows.
    Swept,
    /// A waiter's listing made or renewed (`p_op` `wait`).
    Wait,
    /// A waiter's listing taken out (`p_op` `unwait`).
    Unwait,
}

impl Word {
    fn parse(word: &str) -> Option<Self> {
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

/// One row of the function's answer.
pub(crate) struct Reply {
    pub(crate) op: Operation,
    pub(crate) outcome: Word,
    pub(crate) ms: Option<i64>,
    pub(crate) holder: Option<String>,
    pub(crate) fencing: Option<i64>,
    pub(crate) holds: Option<i32>,
}

impl Reply {
    pub(crate) fn decode(op: Operation, row: &PgRow) -> Result<Self> {
        let word: Option<String> = row.try_get(0).map_err(|e| protocol(op, e))?;
        let word = word.unwrap_or_default();
        let outcome = Word::parse(&word)
            .ok_or_else(|| protocol(op, format!("the function answered outcome {word:?}")))?;
        let get = || -> std::result::Result<Reply, sqlx::Error> {
            Ok(Reply {
                op,
                outcome,
                ms: row.try_get(1)?,
                holder: row.try_get(2)?,
                fencing: row.try_get(3)?,
                holds: row.try_get(4)?,
            })
        };
        get().map_err(|e| protocol(op, e))
    }

    pub(crate) fn unexpected(&self) -> Error {
        protocol(self.op, format!("outcome {:?}", self.outcome))
    }

    pub(crate) fn prolong_outcome(&self) -> Result<ProlongOutcome> {
        match self.outcome {
            Word::Prolonged => Ok(ProlongOutcome::Prolonged),
            Word::ProlongedLate => Ok(ProlongOutcome::ProlongedLate),
            Word::Lost => Ok(ProlongOutcome::Lost),
            _ => Err(self.unexpected()),
        }
    }

    pub(crate) fn remaining(&self) -> Result<Duration> {
        let ms = self.ms.ok_or_else(|| self.unexpected())?;
        Ok(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
    }

    pub(crate) fn fencing(&self) -> Result<Fencing> {
        let f = self.fencing.ok_or_else(|| self.unexpected())?;
        u64::try_from(f).map(Fencing).map_err(|_| self.unexpected())
    }

    pub(crate) fn holds(&self) -> Result<u32> {
        let h = self.holds.ok_or_else(|| self.unexpected())?;
        u32::try_from(h).map_err(|_| self.unexpected())
    }

    pub(crate) fn holder(&self) -> Result<Option<lock_core::HolderInfo>> {
        self.holder
            .as_deref()
            .map(|json| parse_holder(self.op, json))
            .transpose()
    }

    pub(crate) fn state(&self) -> Result<LockState> {
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
}

/// Holder info stored as JSON in a row.
pub(crate) fn parse_holder(op: Operation, json: &str) -> Result<lock_core::HolderInfo> {
    lock_sql::holder_from_json(NAME, json, op)
}

#[cfg(test)]
mod tests {
    use super::Word;

    /// Every outcome word the function writes decodes; another word does not. (A word the
    /// decoder missed was a protocol error on every waiter's listing, `wait`.)
    #[test]
    fn every_word_the_function_writes_decodes() {
        let schema = include_str!("sql/schema.sql");
        let mut words = vec!["wait", "unwait"];
        for line in schema.lines().filter(|l| l.contains("o_outcome :=")) {
            let quoted = line.split('\'').skip(1).step_by(2);
            // `CASE WHEN phase = 'live' THEN …`: the phase is not an outcome.
            words.extend(quoted.filter(|w| *w != "live"));
        }
        assert!(words.len() > 12, "{words:?}");
        for word in words {
            assert!(Word::parse(word).is_some(), "{word:?} does not decode");
        }
        assert_eq!(Word::parse("bogus"), None);
        assert_eq!(Word::parse(""), None);
    }
}
