//! Fencing checked where the write lands.
//!
//! A lock's fencing token is only worth something if the resource refuses a stale one: a
//! holder paused past its ttl (a GC pause, a stopped VM, a partition) wakes up believing it
//! still holds the lock, and its write must not land over the newer holder's. So each
//! resource remembers the highest token that wrote to it, and a write whose token is lower
//! is refused **in the same atomic step as the write**, so that no newer write can come
//! between the check and the write. Equal tokens pass: one holder writes as often as it
//! likes.
//!
//! The rule is written once, here ([`admits`]); each store applies it in its own atomic
//! step:
//!
//! | store | helper | the atomic step |
//! |---|---|---|
//! | Postgres | `lock_postgres::fence` | one upsert on a fence table, inside the caller's transaction |
//! | MySQL, MariaDB | `lock_mysql::fence` | an upsert and a locking read (`FOR UPDATE`) on a fence table, inside the caller's transaction |
//! | Redis | `lock_redis::fence` | one script: check the fence key, then `SET` the value |
//! | a file | `lock_file::fence` | under a lock file: the fence, then the content, each replaced atomically |
//! | in this process | [`MemoryFence`] | one mutex |
//!
//! For any other store: keep `highest` per resource next to the data, and in one
//! transaction (or under one lock) read it, refuse with [`stale`] when [`admits`] says no,
//! else write the data and store the new highest token. A refused write is an
//! [`ErrorKind::StaleToken`] error; [`Error::stale_token`]
//! names both tokens.
//!
//! ```
//! use lock_core::fence::MemoryFence;
//! use lock_core::{ErrorKind, Fencing};
//!
//! let fence = MemoryFence::new();
//! let mut balance = 100;
//! // The old holder (token 7) writes, then a newer holder (token 9).
//! fence.write("balance", Fencing(7), || balance -= 10)?;
//! fence.write("balance", Fencing(9), || balance += 5)?;
//! // The old holder wakes up from a pause and writes again: refused, nothing changes.
//! let refused = fence.write("balance", Fencing(7), || balance = 0).unwrap_err();
//! assert_eq!(refused.kind(), ErrorKind::StaleToken);
//! let stale = refused.stale_token().expect("both tokens");
//! assert_eq!((stale.presented, stale.highest), (Fencing(7), Fencing(9)));
//! assert_eq!(balance, 95);
//! # Ok::<(), lock_core::Error>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use crate::{Error, ErrorKind, Fencing, Operation};

/// Whether a write with `presented` may land on a resource whose highest token so far is
/// `highest` (`None`: no fenced write yet). The one rule every fence applies.
pub fn admits(highest: Option<Fencing>, presented: Fencing) -> bool {
    highest.is_none_or(|highest| presented >= highest)
}

/// The tokens of a refused write: the error's source (see [`Error::stale_token`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleToken {
    /// The resource written to.
    pub resource: String,
    /// The token the refused write presented.
    pub presented: Fencing,
    /// The highest token that wrote to the resource.
    pub highest: Fencing,
}

impl fmt::Display for StaleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the write to {:?} with fencing token {} was refused: token {} wrote there since",
            self.resource, self.presented, self.highest
        )
    }
}

impl std::error::Error for StaleToken {}

/// The error of a refused write to `resource` at `store` (a name such as `"postgres"`,
/// shown in the message).
pub fn stale(store: &'static str, resource: &str, presented: Fencing, highest: Fencing) -> Error {
    let tokens = StaleToken {
        resource: resource.to_owned(),
        presented,
        highest,
    };
    Error::new(
        ErrorKind::StaleToken,
        store,
        Operation::Fence,
        format!(
            "{tokens}; this holder's lock is not its own any more: stop, and obtain the lock \
             anew before writing again"
        ),
    )
    .with_source(tokens)
}

/// A fence for resources in this process (or a test): the highest token per resource, in
/// memory, checked and written under one mutex.
#[derive(Debug, Default)]
pub struct MemoryFence {
    highest: Mutex<HashMap<String, Fencing>>,
}

impl MemoryFence {
    /// A fence that has seen no write.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `write` if `token` is not stale for `resource`, and records it: `write`'s
    /// output, or an [`ErrorKind::StaleToken`] error (and `write` never ran).
    ///
    /// # Errors
    /// [`ErrorKind::StaleToken`] when a higher token wrote to `resource` before.
    pub fn write<T>(
        &self,
        resource: &str,
        token: Fencing,
        write: impl FnOnce() -> T,
    ) -> crate::Result<T> {
        let mut highest = self.highest.lock().unwrap_or_else(|p| p.into_inner());
        let seen = highest.get(resource).copied();
        if !admits(seen, token) {
            let seen = seen.unwrap_or(token);
            return Err(stale("memory", resource, token, seen));
        }
        let value = write();
        highest.insert(resource.to_owned(), token);
        Ok(value)
    }

    /// The highest token that wrote to `resource`, if any.
    pub fn highest(&self, resource: &str) -> Option<Fencing> {
        let highest = self.highest.lock().unwrap_or_else(|p| p.into_inner());
        highest.get(resource).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_and_higher_tokens_pass_lower_ones_do_not() {
        assert!(admits(None, Fencing(0)));
        assert!(admits(Some(Fencing(5)), Fencing(5)));
        assert!(admits(Some(Fencing(5)), Fencing(6)));
        assert!(!admits(Some(Fencing(5)), Fencing(4)));
    }

    #[test]
    fn a_refused_write_names_both_tokens_and_changes_nothing() {
        let fence = MemoryFence::new();
        fence.write("r", Fencing(10), || ()).unwrap();
        let mut ran = false;
        let e = fence.write("r", Fencing(3), || ran = true).unwrap_err();
        assert!(!ran);
        assert_eq!(e.kind(), ErrorKind::StaleToken);
        assert_eq!(e.operation(), Operation::Fence);
        assert_eq!(
            e.stale_token(),
            Some(&StaleToken {
                resource: "r".into(),
                presented: Fencing(3),
                highest: Fencing(10),
            })
        );
        assert!(e.to_string().contains("fencing token 3"), "{e}");
        assert!(e.to_string().contains("token 10 wrote there since"), "{e}");
        assert!(!e.is_retry_safe());
        assert_eq!(fence.highest("r"), Some(Fencing(10)));
    }
}
