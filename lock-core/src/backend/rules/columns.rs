//! A record as the SQL backends store it: one row of plain columns, so that an operator's
//! `SELECT * FROM distlock` reads it, and both SQL backends (lock-postgres's shared path,
//! lock-mysql throughout) encode and decode it the same way.

use serde::{Deserialize, Serialize};

use super::{Hold, Record, Share, Shared, State, Writer};

/// How long a free row remembers its key's last fencing token, in µs: a day.
pub const FREE_KEEP_US: u64 = 24 * 3600 * 1_000_000;

/// One key's record as columns. Tokens are digests (`Token::digest`) and holders JSON
/// text, as the SQL backends store them; times are µs since the epoch of the server's
/// clock.
///
/// - `state` `"free"`: the row only remembers `fencing` (until `forget_us`).
/// - `"cooling"`: `expires_us` = `forget_us` = the end of the cooldown.
/// - `"held"`: `token`, `holder`, `holds`, `expires_us`; `forget_us` ends the grace period.
/// - `"shared"`: `shares` holds `{"capacity": C, "holds": [{"token", "holder", "holds",
///   "expires", "forget", "fencing", "weight"}]}`; `token` is `""` (nobody's), `holder`
///   the holder of the hold that ends last, `expires_us` its end, `forget_us` the last
///   grace's end: code that knows nothing of shares sees the key held by someone else.
///
/// `writer`: a waiting writer's marker, `{"token": T, "until": µs}`, beside any state. A
/// row past `forget_us` may still carry a live marker: a sweep asks
/// [`rules::forgotten`](super::forgotten) of the decoded record before it deletes one.
///
/// ```
/// use lock_core::backend::rules::{Clock, Record, State};
/// use lock_core::backend::rules::columns::Columns;
///
/// let free: Record<String, String> = Record { fencing: 7, state: State::Free, writer: None };
/// let row = Columns::of(&free, 1_000);
/// assert_eq!((row.state, row.fencing), ("free", 7));
/// assert_eq!(row.into_record().unwrap(), free);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    /// `free`, `cooling`, `held` or `shared`.
    pub state: &'static str,
    /// The holder's token digest (`held`), `""` (`shared`), else `None`.
    pub token: Option<String>,
    /// The holder info as JSON (`held`, `shared`).
    pub holder: Option<String>,
    /// The key's last fencing token.
    pub fencing: u64,
    /// The reentrant hold count (`held`).
    pub holds: Option<u32>,
    /// The end of the hold or cooldown, in µs.
    pub expires_us: u64,
    /// When the row may be forgotten, in µs.
    pub forget_us: u64,
    /// The shared holds as JSON (`shared`).
    pub shares: Option<String>,
    /// The writer's marker as JSON.
    pub writer: Option<String>,
}

/// A shared hold in `shares`.
#[derive(Serialize, Deserialize)]
struct ShareJson {
    token: String,
    holder: String,
    holds: u32,
    /// µs since the epoch.
    expires: u64,
    forget: u64,
    fencing: u64,
    weight: u32,
}

/// `shares`.
#[derive(Serialize, Deserialize)]
struct SharesJson {
    capacity: u32,
    holds: Vec<ShareJson>,
}

/// `writer`.
#[derive(Serialize, Deserialize)]
struct WriterJson {
    token: String,
    /// µs since the epoch.
    until: u64,
}

impl Columns {
    /// The row that stores `record` at server time `now_us` (µs). The record's times are
    /// nanoseconds ([`Clock::nanos`](super::Clock::nanos)); the row keeps whole µs.
    pub fn of(record: &Record<String, String>, now_us: u64) -> Columns {
        let us = |ns: u64| ns / 1000;
        let mut row = Columns {
            state: "free",
            token: None,
            holder: None,
            fencing: record.fencing,
            holds: None,
            expires_us: now_us,
            forget_us: now_us.saturating_add(FREE_KEEP_US),
            shares: None,
            writer: record.writer.as_ref().map(|w| {
                json(&WriterJson {
                    token: w.token.clone(),
                    until: us(w.until),
                })
            }),
        };
        match &record.state {
            State::Free => {}
            State::Cooling { until } => {
                row.state = "cooling";
                row.expires_us = us(*until);
                row.forget_us = us(*until);
            }
            State::Held(h) => {
                row.state = "held";
                row.token = Some(h.token.clone());
                row.holder = Some(h.holder.clone());
                row.holds = Some(h.holds);
                row.expires_us = us(h.expires);
                row.forget_us = us(h.forget);
            }
            State::Shared(s) => {
                let last = s.holds.iter().max_by_key(|sh| sh.hold.expires);
                row.state = "shared";
                row.token = Some(String::new());
                row.holder = last.map(|sh| sh.hold.holder.clone());
                row.expires_us = last.map_or(now_us, |sh| us(sh.hold.expires));
                row.forget_us = s
                    .holds
                    .iter()
                    .map(|sh| us(sh.hold.forget))
                    .max()
                    .unwrap_or(now_us);
                row.shares = Some(json(&SharesJson {
                    capacity: s.capacity,
                    holds: s
                        .holds
                        .iter()
                        .map(|sh| ShareJson {
                            token: sh.hold.token.clone(),
                            holder: sh.hold.holder.clone(),
                            holds: sh.hold.holds,
                            expires: us(sh.hold.expires),
                            forget: us(sh.hold.forget),
                            fencing: sh.fencing,
                            weight: sh.weight,
                        })
                        .collect(),
                }));
            }
        }
        row
    }

    /// The record this row stores, times in nanoseconds.
    ///
    /// # Errors
    /// The name of the first column that is not what [`Columns::of`] writes (`"state"`,
    /// `"token"`, `"hold count"`, `"shares"`, `"writer's marker"`): the row is corrupt.
    pub fn into_record(self) -> Result<Record<String, String>, &'static str> {
        let ns = |us: u64| us.saturating_mul(1000);
        let state = match self.state {
            "free" => State::Free,
            "cooling" => State::Cooling {
                until: ns(self.expires_us),
            },
            "held" => State::Held(Hold {
                token: self.token.ok_or("token")?,
                holder: self.holder.unwrap_or_default(),
                holds: self.holds.ok_or("hold count")?,
                expires: ns(self.expires_us),
                forget: ns(self.forget_us),
            }),
            "shared" => {
                let json: SharesJson = self
                    .shares
                    .as_deref()
                    .and_then(|s| serde_json::from_str(s).ok())
                    .ok_or("shares")?;
                State::Shared(Shared {
                    capacity: json.capacity,
                    holds: json
                        .holds
                        .into_iter()
                        .map(|s| Share {
                            hold: Hold {
                                token: s.token,
                                holder: s.holder,
                                holds: s.holds,
                                expires: ns(s.expires),
                                forget: ns(s.forget),
                            },
                            fencing: s.fencing,
                            weight: s.weight,
                        })
                        .collect(),
                })
            }
            _ => return Err("state"),
        };
        let writer = match self.writer {
            None => None,
            Some(json) => {
                let w: WriterJson = serde_json::from_str(&json).map_err(|_| "writer's marker")?;
                Some(Writer {
                    token: w.token,
                    until: ns(w.until),
                })
            }
        };
        Ok(Record {
            fencing: self.fencing,
            state,
            writer,
        })
    }

    /// The `state` word as this module writes it, for a value read from a row: `None`
    /// for anything else.
    pub fn state_word(read: &str) -> Option<&'static str> {
        ["free", "cooling", "held", "shared"]
            .into_iter()
            .find(|w| *w == read)
    }
}

/// Plain data with string keys: serializing cannot fail.
fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(token: &str, expires: u64) -> Hold<String, String> {
        Hold {
            token: token.to_owned(),
            holder: format!("{{\"who\":\"{token}\"}}"),
            holds: 2,
            expires,
            forget: expires + 5_000_000,
        }
    }

    #[test]
    fn every_state_survives_the_round_trip() {
        let writer = Some(Writer {
            token: "w".to_owned(),
            until: 9_000_000_000,
        });
        for state in [
            State::Free,
            State::Cooling {
                until: 3_000_000_000,
            },
            State::Held(hold("a", 2_000_000_000)),
            State::Shared(Shared {
                capacity: 3,
                holds: vec![
                    Share {
                        hold: hold("a", 2_000_000_000),
                        fencing: 4,
                        weight: 1,
                    },
                    Share {
                        hold: hold("b", 4_000_000_000),
                        fencing: 5,
                        weight: 2,
                    },
                ],
            }),
        ] {
            let record = Record {
                fencing: 5,
                state,
                writer: writer.clone(),
            };
            let row = Columns::of(&record, 1_000_000);
            assert_eq!(row.clone().into_record().unwrap(), record, "{row:?}");
        }
    }

    #[test]
    fn a_shared_row_looks_held_by_the_hold_that_ends_last() {
        let record = Record {
            fencing: 5,
            state: State::Shared(Shared {
                capacity: 2,
                holds: vec![
                    Share {
                        hold: hold("late", 8_000_000_000),
                        fencing: 5,
                        weight: 1,
                    },
                    Share {
                        hold: hold("early", 2_000_000_000),
                        fencing: 4,
                        weight: 1,
                    },
                ],
            }),
            writer: None,
        };
        let row = Columns::of(&record, 1_000);
        assert_eq!(row.token.as_deref(), Some(""));
        assert_eq!(row.expires_us, 8_000_000);
        assert_eq!(row.forget_us, 8_005_000);
        assert!(row.holder.unwrap().contains("late"));
    }

    #[test]
    fn a_corrupt_row_names_its_column() {
        let free = Columns::of(
            &Record {
                fencing: 1,
                state: State::<String, String>::Free,
                writer: None,
            },
            0,
        );
        let cases = [
            (
                Columns {
                    state: "held",
                    holds: Some(1),
                    ..free.clone()
                },
                "token",
            ),
            (
                Columns {
                    state: "shared",
                    shares: Some("[".to_owned()),
                    ..free.clone()
                },
                "shares",
            ),
            (
                Columns {
                    writer: Some("{}".to_owned()),
                    ..free.clone()
                },
                "writer's marker",
            ),
            (
                Columns {
                    state: "gone",
                    ..free
                },
                "state",
            ),
        ];
        for (row, column) in cases {
            assert_eq!(row.into_record().unwrap_err(), column);
        }
        assert_eq!(Columns::state_word("held"), Some("held"));
        assert_eq!(Columns::state_word("HELD"), None);
    }
}
