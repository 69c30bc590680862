//! One token's calls that change what the backend holds for it, one at a time.
//!
//! A guard's calls do not always reach the backend in the order they were sent: Postgres
//! and MariaDB send each on a pooled connection of its own, Redis WATCH retries a
//! transaction whose key moved, and a call whose caller stopped waiting runs on in the
//! background (`detached.rs`). Two such calls of one token can then land in either
//! order, and some orders are wrong: a cancelled reentrant read obtain landing after an
//! upgrade turns the write hold back into a read hold (and its give-back frees the key); a
//! release overtaking a cancelled mode change frees the key, and the change then grants it
//! to nobody.
//!
//! So every call that changes the token's holds or mode (a reentrant obtain and the
//! give-back of its orphaned grant, a mode change, a release) takes the token's [`Turn`]
//! first and keeps it until the backend answered, or, if its caller gave up, until the call
//! and its clean-up ended in the background. The next such call waits for it: each call
//! has its own deadline, so the wait ends. Prolongs take no turn: a prolong only moves the
//! expiry of whatever the token holds, in either mode, and the hold's validity already
//! follows the shortest lease any overlapping prolong may have set.

use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};

/// The calls of one token, shared by every guard of it (reentrant guards, and the guard
/// of a fresh acquisition that replaced an expired hold of the same token).
#[derive(Debug, Clone, Default)]
pub(crate) struct Calls(Arc<Mutex<()>>);

impl Calls {
    /// Waits until no other call of the token is in flight.
    ///
    /// # Cancel safety
    /// Cancel safe: a caller dropped while it waits sends nothing and takes no turn.
    pub(crate) async fn turn(&self) -> Turn {
        Turn {
            _held: Arc::clone(&self.0).lock_owned().await,
        }
    }
}

/// The right to send one call that changes what the backend holds for a token; the next
/// call waits until it is dropped.
#[derive(Debug)]
pub(crate) struct Turn {
    _held: OwnedMutexGuard<()>,
}
