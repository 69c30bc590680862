//! The lock record as the WATCH/MULTI variant reads and writes it, and the contract's
//! decisions on it.
//!
//! The format and the rules are those of `scripts/lock.lua` (whose header documents the
//! format), so the two variants share records and exclude each other on one server.

use std::time::Duration;

use lock_core::{Fencing, HolderInfo, LockState, Operation, Result};

use crate::error::corrupt;

/// How long a released record remembers its fencing token (as in the script).
pub(crate) const FREE_KEEP_MS: u64 = 3_600_000;

/// What a record says about its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Held,
    Cooling,
    Free,
}

/// A decoded record; times are server milliseconds.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) state: State,
    pub(crate) token: String,
    pub(crate) fencing: u64,
    pub(crate) holds: u32,
    pub(crate) expires: u64,
    pub(crate) forget: u64,
    pub(crate) holder: String,
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
    /// Decodes `v1|state|token|fencing|holds|expires|forget|holder`; anything else is
    /// `Corrupt`. As strict as the script, so the two variants agree on every record: the
    /// state in lower case, the token hex (possibly empty), numbers of 1 to 16 plain digits
    /// (exact in Lua), holds at most `u32::MAX`.
    pub(crate) fn decode(
        backend: &'static str,
        op: Operation,
        name: &str,
        raw: &str,
    ) -> Result<Self> {
        let bad = || {
            corrupt(
                backend,
                op,
                format!("{name} is a string but not a lock record"),
            )
        };
        let mut f = raw.splitn(8, '|');
        if f.next() != Some("v1") {
            return Err(bad());
        }
        let state = match f.next() {
            Some("held") => State::Held,
            Some("cooling") => State::Cooling,
            Some("free") => State::Free,
            _ => return Err(bad()),
        };
        let token = f
            .next()
            .filter(|t| t.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(bad)?
            .to_owned();
        let mut num = |max_digits: usize| -> Result<u64> {
            f.next()
                .filter(|s| {
                    (1..=max_digits).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
                })
                .and_then(|s| s.parse().ok())
                .ok_or_else(bad)
        };
        let fencing = num(16)?;
        let holds = u32::try_from(num(10)?).map_err(|_| bad())?;
        let expires = num(16)?;
        let forget = num(16)?;
        let holder = f.next().ok_or_else(bad)?.to_owned();
        Ok(Record {
            state,
            token,
            fencing,
            holds,
            expires,
            forget,
            holder,
        })
    }

    /// The record's text, as the script writes it.
    pub(crate) fn encode(&self) -> String {
        let state = match self.state {
            State::Held => "held",
            State::Cooling => "cooling",
            State::Free => "free",
        };
        format!(
            "v1|{state}|{}|{}|{}|{}|{}|{}",
            self.token, self.fencing, self.holds, self.expires, self.forget, self.holder
        )
    }

    /// The phase at server time `now` for `token` (`None`: nobody's).
    pub(crate) fn phase(rec: Option<&Record>, now: u64, token: Option<&str>) -> Phase {
        let Some(r) = rec else { return Phase::Free };
        if r.state == State::Free || r.forget <= now {
            return Phase::Free;
        }
        if r.state == State::Cooling {
            return Phase::Cooling {
                remaining: r.expires - now,
            };
        }
        let ours = token == Some(r.token.as_str());
        if r.expires > now {
            Phase::Live {
                ours,
                remaining: r.expires - now,
            }
        } else {
            Phase::Expired { ours }
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
            (Phase::Live { remaining, .. }, Some(r)) => LockState::Held {
                holder: parse_holder(backend, op, &r.holder)?,
                fencing: Fencing(r.fencing),
                remaining: Duration::from_millis(remaining),
                holds: r.holds,
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

#[cfg(test)]
mod tests {
    use super::*;

    include!("../tests/support/records.rs");

    #[test]
    fn records_round_trip_and_junk_is_corrupt() {
        let r = Record {
            state: State::Held,
            token: "ab12".into(),
            fencing: 1_795_000_000_000_001,
            holds: 2,
            expires: 10,
            forget: 20,
            holder: r#"{"host":"a|b","pid":1}"#.into(),
        };
        let back = Record::decode("t", Operation::Inspect, "k", &r.encode()).unwrap();
        assert_eq!(back.encode(), r.encode());
        assert_eq!(back.holder, r.holder, "a '|' in the holder survives");
        for valid in VALID_RECORDS {
            assert!(
                Record::decode("t", Operation::Inspect, "k", valid).is_ok(),
                "{valid}"
            );
        }
        for junk in INVALID_RECORDS {
            assert!(
                Record::decode("t", Operation::Inspect, "k", junk).is_err(),
                "{junk}"
            );
        }
    }
}
