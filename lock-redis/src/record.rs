//! The lock record as the WATCH/MULTI variant reads and writes it.
//!
//! The format is that of `scripts/lock.lua` (whose header documents it), so the two variants
//! share records and exclude each other on one server. The decisions on a record are
//! `lock_core::backend::rules`, run with the server's clock in milliseconds.

use lock_core::backend::rules::{self, Hold, State};
use lock_core::{HolderInfo, Operation, Result};

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

/// The record's text, as the script writes it at server time `now_ms`. A writer's marker
/// is not kept: this backend keeps no shared holds, which are all a marker keeps out.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](lock_core::ErrorKind::InvalidInput) for shared holds, which
/// this backend does not keep (it refuses shared requests before deciding).
pub(crate) fn encode(r: &Stored, now_ms: u64) -> Result<String> {
    let fencing = r.fencing;
    Ok(match &r.state {
        State::Free => format!("v1|free||{fencing}|0|{now_ms}|{now_ms}|"),
        State::Cooling { until } => format!("v1|cooling||{fencing}|0|{until}|{until}|"),
        State::Held(h) => format!(
            "v1|held|{}|{fencing}|{}|{}|{}|{}",
            h.token, h.holds, h.expires, h.forget, h.holder
        ),
        State::Shared(_) => {
            return Err(lock_core::Error::new(
                lock_core::ErrorKind::InvalidInput,
                crate::RedisBackend::WATCH_NAME,
                Operation::Obtain,
                "the Redis backend keeps exclusive locks only, not semaphores or read locks",
            ))
        }
    })
}

/// How long the key is kept (its `PX`): a held record to the end of its grace period, a
/// cooling one to the end of the cooldown, a free one [`FREE_KEEP_MS`].
pub(crate) fn keep_ms(r: &Stored, now_ms: u64) -> u64 {
    match &r.state {
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
