//! Listing the locks under the backend's prefix: the prefix's range, keys only, walked in
//! chunks; each lock's base read back as its key (the hex undone), kept when the lock has a
//! live hold, a cooldown or a writer's marker (`H/`, `C`, `W`), not for its `F` alone.
//!
//! Hex keeps byte order and prefixes (each byte is two digits), so the lock keys that start
//! with a prefix are one range of bases, in key order: a page ends after a key, and the
//! next starts past that key's range.

use etcd_client::GetOptions;
use lock_core::backend::listing::{prefix_end, FIRST_KEY};
use lock_core::backend::{Cursor, KeyPage, KeysRequest};
use lock_core::{Key, Operation, Result};

use crate::error::{corrupt, Deadline};
use crate::layout::Base;
use crate::EtcdBackend;

/// Keys read per range request.
const CHUNK: i64 = 1_000;
/// Range requests per page at most: a prefix of many locks with nothing live (every `F`
/// left behind) ends a page early, empty but with a cursor, rather than read it all.
const CHUNKS_PER_PAGE: usize = 20;

impl EtcdBackend {
    /// One page of the lock keys under `req.prefix` with something live, by `deadline`.
    ///
    /// The cursor is where the next range read starts, after the backend's prefix: the
    /// base of the lock that did not fit, the end of the last lock listed, or the etcd key
    /// after the last one read when the page's reads ran out inside a lock.
    pub(crate) async fn keys(&self, req: KeysRequest<'_>, deadline: Deadline) -> Result<KeyPage> {
        let op = Operation::List;
        let root = format!("{}/", self.prefix);
        let mut start = format!("{root}{}", hex(req.prefix));
        // No end (a prefix of 0xff bytes only): the range runs to the end, `\0`.
        let range_end = prefix_end(start.as_bytes()).unwrap_or_else(|| vec![0]);
        // The library's own names (hex `01…`) sort below every user key's (`02…` and up).
        let first = format!("{root}{}", hex(FIRST_KEY));
        if start < first {
            start = first;
        }
        let mut from: Vec<u8> = match req.cursor {
            Some(at) => format!("{root}{}", at.as_str()).into_bytes(),
            None => start.into_bytes(),
        };
        let resume = |etcd_key: &[u8]| {
            let at = String::from_utf8_lossy(&etcd_key[root.len().min(etcd_key.len())..]);
            Some(Cursor::new(at.into_owned()))
        };
        let mut keys: Vec<Key> = Vec::new();
        // The lock being read, and whether something live of it was seen.
        let mut current: Option<(String, bool)> = None;
        for _ in 0..CHUNKS_PER_PAGE {
            let (begin, end) = (from.clone(), range_end.clone());
            let read = self
                .members
                .retried(op, "list", deadline, |c| {
                    let options = GetOptions::new()
                        .with_range(end.clone())
                        .with_keys_only()
                        .with_limit(CHUNK);
                    let begin = begin.clone();
                    async move { c.kv_client().get(begin, Some(options)).await }
                })
                .await?;
            for kv in read.kvs() {
                let Some((lock, live)) = lock_of(&root, kv.key()) else {
                    continue;
                };
                match &mut current {
                    Some((name, seen)) if *name == lock => *seen |= live,
                    _ => {
                        if let Some((name, true)) = current.take() {
                            keys.push(key(op, name)?);
                        }
                        if keys.len() == req.limit {
                            // The page is full: the next one starts at this lock.
                            let next = Base::new(&self.prefix, &lock);
                            return Ok(KeyPage {
                                keys,
                                next: resume(next.as_str().as_bytes()),
                            });
                        }
                        current = Some((lock, live));
                    }
                }
            }
            match read.kvs().last() {
                Some(last) if read.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => {
                    if let Some((name, true)) = current.take() {
                        keys.push(key(op, name)?);
                    }
                    return Ok(KeyPage { keys, next: None });
                }
            }
        }
        // The page's reads ran out inside the walk: a lock known live is listed and
        // skipped whole; one not known live yet is read on from where the reads stopped
        // (what could make it live comes later in its range).
        let next = match current {
            Some((name, true)) => {
                let end = Base::new(&self.prefix, &name).end();
                keys.push(key(op, name)?);
                resume(end.as_bytes())
            }
            _ => resume(&from),
        };
        Ok(KeyPage { keys, next })
    }
}

/// The lock key of an etcd key under `root` (hex undone), and whether the etcd key says
/// something live of it; `None` for a key that is no lock's (another prefix's, say).
fn lock_of(root: &str, etcd_key: &[u8]) -> Option<(String, bool)> {
    let rest = std::str::from_utf8(etcd_key).ok()?.strip_prefix(root)?;
    let (hex, slot) = rest.split_once('/')?;
    let live = match slot {
        "C" | "W" => true,
        "F" => false,
        _ if slot.starts_with("H/") => true,
        _ if slot.starts_with("G/") => false,
        _ => return None,
    };
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            let pair = hex.get(i..i + 2)?;
            if pair.bytes().any(|b| b.is_ascii_uppercase()) {
                return None;
            }
            u8::from_str_radix(pair, 16).ok()
        })
        .collect();
    Some((String::from_utf8(bytes?).ok()?, live))
}

fn key(op: Operation, name: String) -> Result<Key> {
    Key::new(name).map_err(|_| corrupt(op, "a lock under the prefix has no valid key".to_owned()))
}

/// `text`'s bytes in lower-case hex, as a lock's base writes them.
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_read_back_as_their_keys() {
        let root = "app/";
        for key in ["k", "jobs/nightly", "é"] {
            let base = Base::new("app", key);
            assert_eq!(
                lock_of(root, base.live("abc").as_bytes()),
                Some((key.into(), true))
            );
            assert_eq!(
                lock_of(root, base.fence().as_bytes()),
                Some((key.into(), false))
            );
            assert_eq!(
                lock_of(root, base.cooling().as_bytes()),
                Some((key.into(), true))
            );
            assert_eq!(
                lock_of(root, base.evidence("a").as_bytes()),
                Some((key.into(), false))
            );
        }
        // Another prefix's keys beneath this one, and strays.
        assert_eq!(
            lock_of(root, Base::new("app/6b", "x").fence().as_bytes()),
            None
        );
        assert_eq!(lock_of(root, b"app/6B/F"), None);
        assert_eq!(lock_of(root, b"app/6/F"), None);
        assert_eq!(lock_of(root, b"other/6b/F"), None);
    }
}
