//! The key-to-file-name mapping: injective, and unable to name anything outside the
//! directory.
//!
//! `a-z`, `0-9`, `_` and `-` stand for themselves; every other byte (upper-case letters
//! included, so that case-insensitive file systems cannot merge `K` and `k`) is written
//! `%XX`. Since `%` itself is always escaped, two keys never share a name. Every name starts
//! with `k-` (no `.`, `..` or device names) and ends with `.lock`. An encoded key longer than
//! [`MAX_ENCODED`] bytes is replaced by `h-` and the SHA-256 of the key; the full key is kept
//! inside the record and checked on every read.

use sha2::{Digest, Sha256};

/// The longest encoded key kept verbatim; file names stay under 255 bytes.
pub(crate) const MAX_ENCODED: usize = 200;

pub(crate) fn file_name(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 8);
    out.push_str("k-");
    for &b in key.as_bytes() {
        if b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(hex(b >> 4));
            out.push(hex(b & 0xf));
        }
        if out.len() > MAX_ENCODED + 2 {
            return hashed(key);
        }
    }
    out.push_str(".lock");
    out
}

/// The key a verbatim name stands for (`k-…lock`); `None` for a hashed name (`h-…`: the
/// key is inside the record) or anything else.
pub(crate) fn key_of(name: &str) -> Option<String> {
    let encoded = name.strip_prefix("k-")?.strip_suffix(".lock")?;
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut rest = encoded.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    let key = String::from_utf8(bytes).ok()?;
    // Only the name this key is written under: no stray file passes for a key.
    (!key.is_empty() && file_name(&key) == name).then_some(key)
}

fn hashed(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(2 + 64 + 5);
    out.push_str("h-");
    for b in digest {
        out.push(hex(b >> 4));
        out.push(hex(b & 0xf));
    }
    out.push_str(".lock");
    out
}

fn hex(n: u8) -> char {
    char::from_digit(u32::from(n), 16)
        .unwrap_or('0')
        .to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe_and_distinct() {
        let keys = [
            "k",
            "K",
            "../x",
            "/etc/passwd",
            ".",
            "..",
            "a/b",
            "a%2Fb",
            "\\",
            "ключ",
            "con",
            "a b",
        ];
        let names: std::collections::HashSet<_> = keys.iter().map(|k| file_name(k)).collect();
        assert_eq!(names.len(), keys.len());
        for n in &names {
            assert!(
                !n.contains('/') && !n.contains('\\') && !n.contains(".."),
                "{n}"
            );
            assert!(
                n.starts_with("k-") && n.ends_with(".lock") && n.len() < 255,
                "{n}"
            );
        }
    }

    #[test]
    fn verbatim_names_read_back_as_their_keys() {
        for key in ["k", "K", "jobs/nightly report", "é%", "a-b_c"] {
            assert_eq!(key_of(&file_name(key)).as_deref(), Some(key), "{key}");
        }
        assert_eq!(key_of(&file_name(&"x".repeat(500))), None, "hashed");
        for stray in [
            "k-.lock",
            "k-%zz.lock",
            "k-%41%.lock",
            "k-A.lock",
            "notes.txt",
        ] {
            assert_eq!(key_of(stray), None, "{stray}");
        }
    }

    #[test]
    fn long_keys_are_hashed() {
        let a = file_name(&"a".repeat(1024));
        let b = file_name(&format!("{}b", "a".repeat(1023)));
        assert!(a.starts_with("h-") && a.len() < 255);
        assert_ne!(a, b);
        assert!(
            file_name(&"Z".repeat(70)).starts_with("h-"),
            "escaping counts toward the limit"
        );
    }
}
