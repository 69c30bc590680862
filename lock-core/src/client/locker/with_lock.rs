//! [`Locker::with_lock`]: a closure run under a lock, and the [`HeldLock`] it gets.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use super::{Attempt, Locker};
use crate::{Fencing, Key, Result};

impl Locker {
    /// Obtains `key` (waiting per the defaults), runs `f` while a watchdog keeps the lock,
    /// then releases it.
    ///
    /// `f` gets a [`HeldLock`] to read the fencing token and select on the lost signal. If
    /// the lock is lost meanwhile, `f` still runs to its end unless it watches
    /// [`HeldLock::lost`]; the loss is logged.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use lock_core::{Locker, MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let total = locker
    ///     .with_lock("counter", |held| async move { held.fencing().0 + 1 })
    ///     .await?
    ///     .obtained()
    ///     .expect("nobody else holds it");
    /// assert!(total > 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As for [`LockBuilder::obtain`](super::LockBuilder::obtain), or the release's error.
    ///
    /// # Cancel safety
    /// Dropping the future drops `f`'s future and the guard: the lock is released in the
    /// background (see [`LockGuard`](crate::LockGuard)), and an obtain still in flight gives back its grant.
    pub async fn with_lock<F, Fut, T>(&self, key: impl AsRef<str>, f: F) -> Result<Attempt<T>>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = match self.lock(key).watchdog().obtain().await? {
            Attempt::Obtained(guard) => guard,
            Attempt::Busy(busy) => return Ok(Attempt::Busy(busy)),
        };
        let held = HeldLock {
            key: guard.key().clone(),
            fencing: guard.fencing(),
            lost: guard.lost_token(),
        };
        let value = f(held).await;
        // A `Lost` release is already logged and has fired the lost signal.
        let _outcome = guard.release().await?;
        Ok(Attempt::Obtained(value))
    }
}

/// What [`Locker::with_lock`] hands its closure.
#[derive(Debug, Clone)]
pub struct HeldLock {
    key: Key,
    fencing: Fencing,
    lost: CancellationToken,
}

impl HeldLock {
    /// The locked key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The fencing token of this acquisition.
    pub fn fencing(&self) -> Fencing {
        self.fencing
    }

    /// Resolves when the lock is known to be lost, under the rules of [`LockGuard::lost`](crate::LockGuard::lost).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits; dropping it changes nothing.
    pub async fn lost(&self) {
        self.lost.cancelled().await
    }

    /// Whether the lock is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }
}
