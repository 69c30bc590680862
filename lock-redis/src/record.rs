//! The lock record as the WATCH/MULTI variant reads it, and the contract's decisions on it.
//!
//! The fields and the rules are those of `scripts/lock.lua`, so the two variants read and
//! write the same records and exclude each other on one server.

use std::time::Duration;

use lock_core::{Fencing, HolderInfo, LockState, Operation, Result};

use crate::error::corrupt;

/// The hash fields of a record, in the order the WATCH variant asks for them.
pub(crate) const FIELDS: [&str; 8] = [
    "st", "tok", "holder", "fen", "holds", "exp", "forget", "until",
];

/// A decoded record; times are server milliseconds.
#[derive(Debug, Clone)]
pub(crate) enum Record {
    Held {
        token: String,
        holder: String,
        fencing: u64,
        holds: u32,
        expires: u64,
        forget: u64,
    },
    Cooling {
        until: u64,
    },
}

/// Where a record stands at one instant, for one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Free,
    Cooling { remaining: u64 },
    Live { ours: bool, remaining: u64 },
    Expired { ours: bool },
}

impl Record {
    /// Decodes `FIELDS` of a key that exists; anything else than a lock record is `Corrupt`.
    pub(crate) fn decode(
        backend: &'static str,
        op: Operation,
        name: &str,
        f: Vec<Option<String>>,
    ) -> Result<Self> {
        let bad = || {
            corrupt(
                backend,
                op,
                format!("{name} is a hash but not a lock record"),
            )
        };
        let num = |i: usize| -> Option<u64> { f.get(i)?.as_deref()?.parse().ok() };
        match f.first().and_then(Option::as_deref) {
            Some("held") => Ok(Record::Held {
                token: f.get(1).cloned().flatten().ok_or_else(bad)?,
                holder: f.get(2).cloned().flatten().ok_or_else(bad)?,
                fencing: num(3).ok_or_else(bad)?,
                holds: num(4).and_then(|h| u32::try_from(h).ok()).ok_or_else(bad)?,
                expires: num(5).ok_or_else(bad)?,
                forget: num(6).ok_or_else(bad)?,
            }),
            Some("cooling") => Ok(Record::Cooling {
                until: num(7).ok_or_else(bad)?,
            }),
            _ => Err(bad()),
        }
    }

    /// The phase at server time `now` for `token` (`None`: nobody's).
    pub(crate) fn phase(rec: Option<&Record>, now: u64, token: Option<&str>) -> Phase {
        match rec {
            None => Phase::Free,
            Some(Record::Cooling { until }) if *until > now => Phase::Cooling {
                remaining: until - now,
            },
            Some(Record::Cooling { .. }) => Phase::Free,
            Some(Record::Held { forget, .. }) if *forget <= now => Phase::Free,
            Some(Record::Held {
                token: t, expires, ..
            }) => {
                let ours = token == Some(t.as_str());
                if *expires > now {
                    Phase::Live {
                        ours,
                        remaining: expires - now,
                    }
                } else {
                    Phase::Expired { ours }
                }
            }
        }
    }

    /// The state an observer sees at `now`.
    pub(crate) fn state(
        rec: Option<&Record>,
        now: u64,
        backend: &'static str,
        op: Operation,
    ) -> Result<LockState> {
        Ok(match (Self::phase(rec, now, None), rec) {
            (Phase::Cooling { remaining }, _) => LockState::Cooling {
                remaining: Duration::from_millis(remaining),
            },
            (
                Phase::Live { remaining, .. },
                Some(Record::Held {
                    holder,
                    fencing,
                    holds,
                    ..
                }),
            ) => LockState::Held {
                holder: parse_holder(backend, op, holder)?,
                fencing: Fencing(*fencing),
                remaining: Duration::from_millis(remaining),
                holds: *holds,
            },
            _ => LockState::Free,
        })
    }
}

/// Holder info stored as JSON in the record.
pub(crate) fn parse_holder(backend: &'static str, op: Operation, json: &str) -> Result<HolderInfo> {
    serde_json::from_str(json).map_err(|e| {
        corrupt(
            backend,
            op,
            format!("the record's holder field is not holder info ({e})"),
        )
    })
}
