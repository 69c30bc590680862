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
        LockKeys {
            record: format!("{prefix}{{{tag}}}:rec:{k}"),
            channel: format!("{prefix}{{{tag}}}:released:{k}"),
        }
    }
}
