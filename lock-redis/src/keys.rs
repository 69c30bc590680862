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
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digest = Sha256::digest(key.as_str().as_bytes());
        let mut tag = [0u8; 18];
        tag[0] = b'{';
        tag[17] = b'}';
        for (i, b) in digest[..8].iter().enumerate() {
            tag[1 + 2 * i] = HEX[usize::from(b >> 4)];
            tag[2 + 2 * i] = HEX[usize::from(b & 0xf)];
        }
        let tag = std::str::from_utf8(&tag).expect("hex digits are ASCII");
        // One allocation per name (this runs on every call).
        let name = |kind: &str| {
            let k = key.as_str();
            let mut s = String::with_capacity(prefix.len() + tag.len() + kind.len() + k.len());
            if prefix.contains('{') {
                s.push_str(tag);
                s.push_str(prefix);
            } else {
                s.push_str(prefix);
                s.push_str(tag);
            }
            s.push_str(kind);
            s.push_str(k);
            s
        };
        LockKeys {
            record: name(":rec:"),
            channel: name(":released:"),
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
    fn names_are_those_every_version_uses() {
        // The names are shared by every running version during a rolling deploy: a change
        // here splits one lock in two. The tag is SHA-256("jobs/nightly")[..8] in hex.
        let names = LockKeys::new("lock:", &Key::new("jobs/nightly").unwrap());
        assert_eq!(names.record, "lock:{933f0a5ebdb23af5}:rec:jobs/nightly");
        assert_eq!(
            names.channel,
            "lock:{933f0a5ebdb23af5}:released:jobs/nightly"
        );
        let names = LockKeys::new("app{", &Key::new("jobs/nightly").unwrap());
        assert_eq!(names.record, "{933f0a5ebdb23af5}app{:rec:jobs/nightly");
    }

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
