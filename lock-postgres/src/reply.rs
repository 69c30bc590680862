//! The function's answer: one row per operation, decoded into the contract's outcomes.

use std::time::Duration;

use lock_core::{Error, ErrorKind, Fencing, LockState, Operation, ProlongOutcome, Result};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::protocol;
use crate::NAME;

/// One row of the function's answer.
pub(crate) struct Reply {
    pub(crate) op: Operation,
    pub(crate) outcome: String,
    pub(crate) ms: Option<i64>,
    pub(crate) holder: Option<String>,
    pub(crate) fencing: Option<i64>,
    pub(crate) holds: Option<i32>,
}

impl Reply {
    pub(crate) fn decode(op: Operation, row: &PgRow) -> Result<Self> {
        let get = || -> std::result::Result<Reply, sqlx::Error> {
            Ok(Reply {
                op,
                outcome: row.try_get::<Option<String>, _>(0)?.unwrap_or_default(),
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
        match self.outcome.as_str() {
            "prolonged" => Ok(ProlongOutcome::Prolonged),
            "prolonged_late" => Ok(ProlongOutcome::ProlongedLate),
            "lost" => Ok(ProlongOutcome::Lost),
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
        match self.outcome.as_str() {
            "free" => Ok(LockState::Free),
            "cooling" => Ok(LockState::Cooling {
                remaining: self.remaining()?,
            }),
            "held" => Ok(LockState::Held {
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
    serde_json::from_str(json).map_err(|e| {
        Error::new(
            ErrorKind::Corrupt,
            NAME,
            op,
            format!("the row's holder is not holder info ({e}); force-release the lock"),
        )
    })
}
