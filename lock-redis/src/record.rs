//! The lock record as the WATCH/MULTI variant reads and writes it.
//!
//! The format is that of `scripts/lock.lua` (whose header documents it), so the two variants
//! share records and exclude each other on one server. The decisions on a record are
//! `lock_core::backend::rules`, run with the server's clock in milliseconds.
//!
//! Shared holds (semaphores, read locks) and a waiting writer's marker are written as `v2|`
//! followed by JSON:
//! `{"fencing":N,"state":"shared","capacity":C,"holds":[{"token","holder","holds","expires",
//! "forget","fencing","weight"}],"writer":{"token","until"}}` (`"state"` may also be
//! `free`, `cooling` with `until`, or `held` with `hold`, when only a marker needs the
//! second form; a `shared` record has at least one hold; numbers have at most 16 digits, as
//! in `v1`). Every other record stays `v1`, so the mutex path costs what it did. The
//! script's `scripts/shared.lua` reads and writes the same `v2`.

use lock_core::backend::rules::{self, Hold, Share, Shared, State, Writer};
use lock_core::{Operation, Result};
use serde::{Deserialize, Serialize};

use crate::error::corrupt;

/// How long a released record remembers its fencing token. The script gets the same value
/// (see `lua.rs`): it is written here only.
pub(crate) const FREE_KEEP_MS: u64 = 3_600_000;

/// A record as the rules see it: the token in hex, the holder info as JSON, server ms.
pub(crate) type Stored = rules::Record<String, String>;

/// Decodes `v1|state|token|fencing|holds|expires|forget|holder`; anything else is
/// `Corrupt`. As strict as the script, so the two variants agree on every record: the state
/// in lower case, the token hex (possibly empty), numbers of 1 to 16 plain digits (exact in
/// Lua), holds at most `u32::MAX`.
pub(crate) fn decode(
    backend: &'static str,
    op: Operation,
    name: &str,
    raw: &str,
) -> Result<Stored> {
    let bad = || {
        corrupt(
            backend,
            op,
            format!("{name} is a string but not a lock record"),
        )
    };
    if let Some(json) = raw.strip_prefix("v2|") {
        return decode_v2(json).ok_or_else(bad);
    }
    let mut f = raw.splitn(8, '|');
    if f.next() != Some("v1") {
        return Err(bad());
    }
    let state = f.next().ok_or_else(bad)?;
    if !matches!(state, "held" | "cooling" | "free") {
        return Err(bad());
    }
    let token = f
        .next()
        .filter(|t| t.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(bad)?;
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
    let holder = f.next().ok_or_else(bad)?;
    let state = match state {
        "free" => State::Free,
        // The script reads a cooling record as free once `forget` has passed, and as cooling
        // until `expires` (both written equal).
        "cooling" => State::Cooling {
            until: expires.min(forget),
        },
        _ => State::Held(Hold {
            token: token.to_owned(),
            holder: holder.to_owned(),
            holds,
            expires,
            forget,
        }),
    };
    Ok(rules::Record::new(fencing, state))
}

/// The record's text at server time `now_ms`: `v1` as the script writes it, or `v2` with
/// shared holds or a writer's marker.
pub(crate) fn encode(r: &Stored, now_ms: u64) -> Result<String> {
    let fencing = r.fencing;
    if r.writer.is_some() || matches!(r.state, State::Shared(_)) {
        return Ok(encode_v2(r));
    }
    Ok(match &r.state {
        State::Free => format!("v1|free||{fencing}|0|{now_ms}|{now_ms}|"),
        State::Cooling { until } => format!("v1|cooling||{fencing}|0|{until}|{until}|"),
        State::Held(h) => format!(
            "v1|held|{}|{fencing}|{}|{}|{}|{}",
            h.token, h.holds, h.expires, h.forget, h.holder
        ),
        State::Shared(_) => encode_v2(r),
    })
}

/// One hold in a `v2` record.
#[derive(Serialize, Deserialize)]
struct V2Hold {
    token: String,
    holder: String,
    holds: u32,
    expires: u64,
    forget: u64,
}

/// One shared hold in a `v2` record.
#[derive(Serialize, Deserialize)]
struct V2Share {
    #[serde(flatten)]
    hold: V2Hold,
    fencing: u64,
    weight: u32,
}

/// The state of a `v2` record.
#[derive(Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum V2State {
    Free,
    Cooling { until: u64 },
    Held { hold: V2Hold },
    Shared { capacity: u32, holds: Vec<V2Share> },
}

/// A waiting writer's marker in a `v2` record.
#[derive(Serialize, Deserialize)]
struct V2Writer {
    token: String,
    until: u64,
}

/// A `v2` record.
#[derive(Serialize, Deserialize)]
struct V2 {
    fencing: u64,
    #[serde(flatten)]
    state: V2State,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    writer: Option<V2Writer>,
}

fn v2_hold(h: &Hold<String, String>) -> V2Hold {
    V2Hold {
        token: h.token.clone(),
        holder: h.holder.clone(),
        holds: h.holds,
        expires: h.expires,
        forget: h.forget,
    }
}

fn encode_v2(r: &Stored) -> String {
    let state = match &r.state {
        State::Free => V2State::Free,
        State::Cooling { until } => V2State::Cooling { until: *until },
        State::Held(h) => V2State::Held { hold: v2_hold(h) },
        State::Shared(s) => V2State::Shared {
            capacity: s.capacity,
            holds: s
                .holds
                .iter()
                .map(|sh| V2Share {
                    hold: v2_hold(&sh.hold),
                    fencing: sh.fencing,
                    weight: sh.weight,
                })
                .collect(),
        },
    };
    let v2 = V2 {
        fencing: r.fencing,
        state,
        writer: r.writer.as_ref().map(|w| V2Writer {
            token: w.token.clone(),
            until: w.until,
        }),
    };
    // Plain data with string keys: serializing cannot fail.
    format!("v2|{}", serde_json::to_string(&v2).unwrap_or_default())
}

/// The largest number a record holds: 16 digits, which Lua's doubles read (the script
/// checks the same).
const MAX_NUMBER: u64 = 9_999_999_999_999_999;

/// Decodes a `v2` record's JSON; `None` for anything else (tokens must be hex and numbers
/// at most [`MAX_NUMBER`], as in v1; shared holds at least one).
fn decode_v2(json: &str) -> Option<Stored> {
    let v2: V2 = serde_json::from_str(json).ok()?;
    let hex = |t: &str| t.bytes().all(|b| b.is_ascii_hexdigit());
    let small = |n: u64| n <= MAX_NUMBER;
    let hold = |h: V2Hold| {
        (hex(&h.token) && small(h.expires) && small(h.forget)).then_some(Hold {
            token: h.token,
            holder: h.holder,
            holds: h.holds,
            expires: h.expires,
            forget: h.forget,
        })
    };
    let state = match v2.state {
        V2State::Free => State::Free,
        V2State::Cooling { until } if small(until) => State::Cooling { until },
        V2State::Cooling { .. } => return None,
        V2State::Held { hold: h } => State::Held(hold(h)?),
        V2State::Shared { holds, .. } if holds.is_empty() => return None,
        V2State::Shared { capacity, holds } => State::Shared(Shared {
            capacity,
            holds: holds
                .into_iter()
                .map(|sh| {
                    if !small(sh.fencing) {
                        return None;
                    }
                    Some(Share {
                        hold: hold(sh.hold)?,
                        fencing: sh.fencing,
                        weight: sh.weight,
                    })
                })
                .collect::<Option<_>>()?,
        }),
    };
    let writer = match v2.writer {
        Some(w) if hex(&w.token) && small(w.until) => Some(Writer {
            token: w.token,
            until: w.until,
        }),
        Some(_) => return None,
        None => None,
    };
    if !small(v2.fencing) {
        return None;
    }
    Some(rules::Record {
        fencing: v2.fencing,
        state,
        writer,
    })
}

/// How long the key is kept (its `PX`): a held record to the end of its grace period, a
/// cooling one to the end of the cooldown, a free one [`FREE_KEEP_MS`]; and at least to the
/// end of a writer's marker.
pub(crate) fn keep_ms(r: &Stored, now_ms: u64) -> u64 {
    let marker = r
        .writer
        .as_ref()
        .map_or(0, |w| w.until.saturating_sub(now_ms));
    let state = match &r.state {
        State::Free => FREE_KEEP_MS,
        State::Cooling { until } => until.saturating_sub(now_ms).max(1),
        State::Held(h) => h.forget.saturating_sub(now_ms).max(1),
        State::Shared(s) => s
            .holds
            .iter()
            .map(|sh| sh.hold.forget)
            .max()
            .unwrap_or(now_ms)
            .saturating_sub(now_ms)
            .max(1),
    };
    state.max(marker)
}

#[cfg(test)]
mod tests {
    use super::*;

    include!("../tests/support/records.rs");

    #[test]
    fn shared_records_and_markers_round_trip_as_v2() {
        let hold = |token: &str, expires| Hold {
            token: token.to_owned(),
            holder: r#"{"host":"a|b","pid":1}"#.to_owned(),
            holds: 2,
            expires,
            forget: expires + 10,
        };
        let shared = rules::Record {
            fencing: 9,
            state: State::Shared(Shared {
                capacity: 3,
                holds: vec![Share {
                    hold: hold("ab", 20),
                    fencing: 8,
                    weight: 2,
                }],
            }),
            writer: Some(Writer {
                token: "cd".to_owned(),
                until: 40,
            }),
        };
        let marked = rules::Record {
            state: State::Held(hold("ef", 30)),
            ..shared.clone()
        };
        for record in [shared, marked] {
            let text = encode(&record, 5).unwrap();
            assert!(text.starts_with("v2|{"), "{text}");
            assert_eq!(decode("t", Operation::Inspect, "k", &text).unwrap(), record);
            assert_eq!(keep_ms(&record, 5), 35, "kept to the marker's end");
        }
        let plain = rules::Record::new(9, State::Held(hold("ef", 30)));
        assert!(encode(&plain, 5)
            .unwrap()
            .starts_with("v1|held|ef|9|2|30|40|"));
        for junk in [
            "v2|",
            "v2|{}",
            r#"v2|{"fencing":1,"state":"held","hold":{"token":"zz","holder":"","holds":1,"expires":1,"forget":1}}"#,
            r#"v2|{"fencing":1,"state":"free","writer":{"token":"not hex","until":1}}"#,
        ] {
            assert!(
                decode("t", Operation::Inspect, "k", junk).is_err(),
                "{junk}"
            );
        }
    }

    #[test]
    fn records_round_trip_and_junk_is_corrupt() {
        let raw = r#"v1|held|ab12|1795000000000001|2|10|20|{"host":"a|b","pid":1}"#;
        let back = decode("t", Operation::Inspect, "k", raw).unwrap();
        assert_eq!(
            encode(&back, 5).unwrap(),
            raw,
            "a '|' in the holder survives"
        );
        for valid in VALID_RECORDS {
            assert!(
                decode("t", Operation::Inspect, "k", valid).is_ok(),
                "{valid}"
            );
        }
        for junk in INVALID_RECORDS {
            assert!(
                decode("t", Operation::Inspect, "k", junk).is_err(),
                "{junk}"
            );
        }
    }
}
