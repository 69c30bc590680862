//! Listing the keys a backend keeps records for: what [`LockBackend::list_keys`] is asked and
//! answers, and [`Smallest`], the bounded page a backend without an ordered index collects
//! while it walks its records.
//!
//! A backend lists key *names*; the crate's `listing::list` turns each into its state with
//! [`LockBackend::inspect`], so a listing agrees with `inspect` key by key by construction,
//! and a backend writes no second decoder of its records.
//!
//! [`LockBackend::list_keys`]: crate::LockBackend::list_keys
//! [`LockBackend::inspect`]: crate::LockBackend::inspect

use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use crate::{Error, ErrorKind, Key, Operation};

/// No key of a user's sorts below it: a key starts with neither NUL nor U+0001 (the
/// library's own names, the waiting records, which a listing leaves out). An
/// ordered walk starts here.
pub const FIRST_KEY: &str = "\u{2}";

/// How a backend lists its keys: [`Capabilities::listing`](super::Capabilities::listing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Listing {
    /// It cannot list: [`LockBackend::list_keys`](crate::LockBackend::list_keys) answers
    /// [`ErrorKind::Unsupported`], and the tools say so instead of showing an empty list.
    #[default]
    Unsupported,
    /// In the keys' byte order, each page after the last key of the one before: every key
    /// that has a record throughout the walk shows exactly once; a key made or removed
    /// during it shows at most once (memory, file, Postgres, MariaDB, etcd).
    InKeyOrder,
    /// In the server's own order, by its cursor (Redis `SCAN`, on each primary of a
    /// cluster): every key that has a record throughout the walk shows at least once, and
    /// may show twice when the server grows or shrinks its table between two pages, or a
    /// cluster moves a slot.
    Scan,
}

/// Where a walk stands: given back by a page, handed to the next call. Opaque; it holds no
/// secret (the last key listed, or a server's scan cursor).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Cursor(String);

impl Cursor {
    /// A cursor with `text` in it, for a backend to read back with [`Cursor::as_str`].
    pub fn new(text: impl Into<String>) -> Self {
        Cursor(text.into())
    }

    /// What the backend put in it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What [`LockBackend::list_keys`](crate::LockBackend::list_keys) is asked.
#[derive(Debug, Clone, Copy)]
pub struct KeysRequest<'a> {
    /// Only keys that start with it (`""`: every key).
    pub prefix: &'a str,
    /// Where the previous page ended; `None` to start.
    pub cursor: Option<&'a Cursor>,
    /// The most keys the page holds, at least 1 (a backend may give fewer, even none,
    /// without the walk being over: only a page with no `next` ends it).
    pub limit: usize,
}

impl KeysRequest<'_> {
    /// The most keys a page may be asked for: a page is held in memory at once.
    pub const MAX_LIMIT: usize = 10_000;

    /// Checks the limit, before any I/O.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a limit of 0 or over [`KeysRequest::MAX_LIMIT`].
    pub fn validate(&self) -> crate::Result<()> {
        if self.limit == 0 || self.limit > Self::MAX_LIMIT {
            return Err(Error::invalid(format!(
                "a page lists 1 to {} keys, not {}",
                Self::MAX_LIMIT,
                self.limit
            )));
        }
        Ok(())
    }
}

/// One page of key names: [`LockBackend::list_keys`](crate::LockBackend::list_keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPage {
    /// The keys, in the backend's order ([`Listing`]); a key may have no live hold any
    /// more (a record kept for late detection, a cooldown that ended).
    pub keys: Vec<Key>,
    /// Where the next page starts; `None` when the walk is over.
    pub next: Option<Cursor>,
}

/// The error of a backend that cannot list, for [`Capabilities::listing`] =
/// [`Listing::Unsupported`]: it names the backend and says what to use instead.
///
/// [`Capabilities::listing`]: super::Capabilities::listing
pub fn unsupported(backend: &'static str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        backend,
        Operation::List,
        "this backend cannot list its locks; inspect a key you know by name instead",
    )
}

/// The `limit` smallest keys past a cursor, among keys met in any order: what a backend
/// without an ordered index (a hash map, a directory) collects while it walks all of its
/// records, in memory bounded by the limit whatever their number.
///
/// ```
/// use lock_core::backend::listing::{Cursor, KeysRequest, Smallest};
///
/// let after = Cursor::new("b");
/// let req = KeysRequest { prefix: "", cursor: Some(&after), limit: 2 };
/// let mut page = Smallest::new(&req);
/// for key in ["e", "a", "c", "b", "d"] {
///     page.offer(key);
/// }
/// let page = page.finish();
/// let keys: Vec<&str> = page.keys.iter().map(|k| k.as_str()).collect();
/// assert_eq!(keys, ["c", "d"]);
/// assert_eq!(page.next.as_ref().map(|c| c.as_str()), Some("d"));
/// ```
#[derive(Debug)]
pub struct Smallest<'a> {
    prefix: &'a str,
    after: Option<&'a str>,
    limit: usize,
    /// A max-heap: its top is the largest kept, the first to go.
    kept: BinaryHeap<String>,
    /// Whether a key past the page was met (so the walk goes on).
    more: bool,
}

impl<'a> Smallest<'a> {
    /// An empty page for `req`.
    pub fn new(req: &KeysRequest<'a>) -> Self {
        Smallest {
            prefix: req.prefix,
            after: req.cursor.map(Cursor::as_str),
            limit: req.limit.max(1),
            kept: BinaryHeap::new(),
            more: false,
        }
    }

    /// Offers one key: kept when it belongs to the page.
    pub fn offer(&mut self, key: &str) {
        if !key.starts_with(self.prefix)
            || self.after.is_some_and(|after| key <= after)
            || key < FIRST_KEY
        {
            return;
        }
        if self.kept.len() < self.limit {
            self.kept.push(key.to_owned());
            return;
        }
        self.more = true;
        if self.kept.peek().is_some_and(|top| key < top.as_str()) {
            self.kept.pop();
            self.kept.push(key.to_owned());
        }
    }

    /// The page: its keys in order, and the cursor after the last one when more were met.
    /// A name that is not a valid key (a stray file) is left out.
    pub fn finish(self) -> KeyPage {
        let sorted = self.kept.into_sorted_vec();
        let next = match self.more {
            true => sorted.last().map(|k| Cursor::new(k.clone())),
            false => None,
        };
        KeyPage {
            keys: sorted
                .into_iter()
                .filter_map(|k| Key::new(k).ok())
                .collect(),
            next,
        }
    }
}

/// The page of an ordered walk that asked for one key more than `limit`: the first `limit`
/// keys, and a cursor after the last of them when the extra one came back. For backends
/// whose store walks in key order (SQL's `ORDER BY`, an etcd range): ask for `limit + 1`.
pub fn ordered_page(mut keys: Vec<Key>, limit: usize) -> KeyPage {
    let more = keys.len() > limit;
    keys.truncate(limit);
    let next = match more {
        true => keys.last().map(|k| Cursor::new(k.as_str())),
        false => None,
    };
    KeyPage { keys, next }
}

/// The first byte string after every string that starts with `prefix`, for a range scan
/// `prefix <= key < end` over a byte-ordered column; `None` when there is none (an empty
/// prefix, or one of `0xff` bytes only: every key past `prefix` starts with it).
///
/// ```
/// assert_eq!(lock_core::backend::listing::prefix_end(b"jobs/"), Some(b"jobs0".to_vec()));
/// assert_eq!(lock_core::backend::listing::prefix_end(b"a\xff"), Some(b"b".to_vec()));
/// assert_eq!(lock_core::backend::listing::prefix_end(b""), None);
/// assert_eq!(lock_core::backend::listing::prefix_end(b"\xff\xff"), None);
/// ```
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(all: &[&str], prefix: &str, limit: usize) -> Vec<String> {
        let mut seen = Vec::new();
        let mut cursor: Option<Cursor> = None;
        loop {
            let req = KeysRequest {
                prefix,
                cursor: cursor.as_ref(),
                limit,
            };
            let mut page = Smallest::new(&req);
            for k in all {
                page.offer(k);
            }
            let page = page.finish();
            seen.extend(page.keys.iter().map(|k| k.as_str().to_owned()));
            match page.next {
                Some(next) => cursor = Some(next),
                None => return seen,
            }
        }
    }

    #[test]
    fn pages_cover_every_key_once_in_order() {
        let all = ["k9", "k1", "x", "k3", "k2", "k10", "k"];
        for limit in 1..=8 {
            assert_eq!(
                walk(&all, "k", limit),
                ["k", "k1", "k10", "k2", "k3", "k9"],
                "limit {limit}"
            );
        }
        assert!(walk(&all, "nothing", 3).is_empty());
    }

    #[test]
    fn an_ordered_walk_ends_when_nothing_is_left_over() {
        let keys = |n: usize| (0..n).map(|i| Key::new(format!("k{i}")).unwrap()).collect();
        let page = ordered_page(keys(3), 3);
        assert_eq!(page.keys.len(), 3);
        assert_eq!(page.next, None);
        let page = ordered_page(keys(4), 3);
        assert_eq!(page.keys.len(), 3);
        assert_eq!(page.next, Some(Cursor::new("k2")));
    }

    #[test]
    fn limits_are_checked() {
        let req = |limit| KeysRequest {
            prefix: "",
            cursor: None,
            limit,
        };
        assert!(req(0).validate().is_err());
        assert!(req(KeysRequest::MAX_LIMIT + 1).validate().is_err());
        assert!(req(1).validate().is_ok());
    }
}
