//! Where a lock lives in Redis.
//!
//! For key `K` under prefix `P` (default `lock:`), with `T` the first 16 hex digits of
//! SHA-256(`K`):
//!
//! | Redis key | type | what |
//! |---|---|---|
//! | `P{T}:rec:K` | string | the record, `v1\|state\|token\|fencing\|holds\|expires\|forget\|holder` (see `scripts/lock.lua`) |
//! | `P{T}:released:K` | channel | a message on every release that frees the lock |
//!
//! The full key is part of every name, so two keys never share a record; the `{T}` hash tag
//! puts both in one Redis Cluster slot whatever characters `K` holds (a `{` or `}` in `K`
//! cannot move the tag, which comes first).
//!
//! A prefix with a `{` in it would take the tag over: Redis hashes from the first `{`, and
//! a prefix such as `app{}` makes it hash each whole name, record and channel apart. So a
//! prefix holding `{` goes after the tag instead: `{T}P:rec:K`, `{T}P:released:K`. Names
//! stay distinct across prefixes and keys either way (a prefix without `{` never starts a
//! name with `{`, and `T` is a digest of `K`).

use lock_core::Key;
use sha2::{Digest, Sha256};

pub(crate) struct LockKeys {
    pub(crate) record: String,
    pub(crate) channel: String,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, key: &Key) -> Self {
        let digest = Sha256::digest(key.as_str().as_bytes());
        let mut tag = String::with_capacity(16);
        for b in &digest[..8] {
            tag.push_str(&format!("{b:02x}"));
        }
        let k = key.as_str();
        if prefix.contains('{') {
            return LockKeys {
                record: format!("{{{tag}}}{prefix}:rec:{k}"),
                channel: format!("{{{tag}}}{prefix}:released:{k}"),
            };
        }
        LockKeys {
            record: format!("{prefix}{{{tag}}}:rec:{k}"),
            channel: format!("{prefix}{{{tag}}}:released:{k}"),
        }
    }
}

/// Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key
/// when it has no non-empty `{…}`, modulo 16384.
pub(crate) fn slot(name: &str) -> u16 {
    let b = name.as_bytes();
    let hashed = match b.iter().position(|&c| c == b'{') {
        Some(open) => match b[open + 1..].iter().position(|&c| c == b'}') {
            Some(len) if len > 0 => &b[open + 1..open + 1 + len],
            _ => b,
        },
        None => b,
    };
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_redis() {
        // From the Redis Cluster specification: CRC16 of "123456789" is 0x31C3.
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
    }

    #[test]
    fn every_name_of_a_lock_shares_one_slot_whatever_the_prefix() {
        let prefixes = [
            "", "lock:", "app{", "app{}", "{}", "x{}y", "{a}", "}{", "{{}}", "a{b}c", "}", "{",
        ];
        let keys = ["k", "{x}", "a{}b", "}{", "{", "jobs/nightly"];
        for prefix in prefixes {
            for key in keys {
                let names = LockKeys::new(prefix, &Key::new(key).unwrap());
                assert_eq!(
                    slot(&names.record),
                    slot(&names.channel),
                    "prefix {prefix:?}, key {key:?}: {} and {}",
                    names.record,
                    names.channel
                );
            }
        }
    }

    #[test]
    fn names_never_meet_across_prefixes_and_keys() {
        let mut seen = std::collections::HashSet::new();
        for prefix in ["", "a", "a{", "{a", "a:", "a{:", "{"] {
            for key in ["b", "{:b", ":b", "a{b", "rec:b"] {
                let names = LockKeys::new(prefix, &Key::new(key).unwrap());
                assert!(seen.insert(names.record.clone()), "{}", names.record);
            }
        }
    }
}
