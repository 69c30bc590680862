//! The schema made or checked once per backend.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use lock_core::Result;

/// Whether a backend's schema was made (or checked), and the turn that makes it: the
/// first call that needs it does it, calls that come meanwhile wait for that one and go
/// on, rather than each migrating again in turn.
#[derive(Debug, Default)]
pub struct SchemaOnce {
    done: AtomicBool,
    turn: tokio::sync::Mutex<()>,
}

impl SchemaOnce {
    /// Runs `make` unless the schema is known to be there (made or checked by an earlier
    /// call, or by the call this one waited for); remembers it when `make` succeeds.
    ///
    /// # Errors
    /// `make`'s; the next call tries again.
    ///
    /// # Cancel safety
    /// Cancel safe: a cancelled `make` leaves the schema unknown, and the next call tries.
    pub async fn ensure<F: Future<Output = Result<()>>>(
        &self,
        make: impl FnOnce() -> F,
    ) -> Result<()> {
        if self.is_done() {
            return Ok(());
        }
        let _turn = self.turn.lock().await;
        if self.is_done() {
            return Ok(());
        }
        make().await?;
        self.done.store(true, Ordering::Release);
        Ok(())
    }

    /// [`SchemaOnce::ensure`] with `migrate` when the backend makes its schema on first use
    /// (`auto_migrate`), or with `check` when it may only check it (`migrate=false`).
    ///
    /// # Errors
    /// `migrate`'s or `check`'s; the next call tries again.
    ///
    /// # Cancel safety
    /// As [`SchemaOnce::ensure`]'s.
    pub async fn migrate_or_check<M, C>(
        &self,
        auto_migrate: bool,
        migrate: impl FnOnce() -> M,
        check: impl FnOnce() -> C,
    ) -> Result<()>
    where
        M: Future<Output = Result<()>>,
        C: Future<Output = Result<()>>,
    {
        self.ensure(|| async move {
            match auto_migrate {
                true => migrate().await,
                false => check().await,
            }
        })
        .await
    }

    /// Runs `make` whether or not the schema is known to be there, in turn with every
    /// other, and remembers it when `make` succeeds: an explicit `migrate()`.
    ///
    /// # Errors
    /// `make`'s.
    pub async fn again<F: Future<Output = Result<()>>>(
        &self,
        make: impl FnOnce() -> F,
    ) -> Result<()> {
        let _turn = self.turn.lock().await;
        make().await?;
        self.done.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether the schema is known to be there.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Forgets it: a call found the table missing (dropped behind the backend's back), and
    /// the next call makes or checks it again.
    pub fn forget(&self) {
        self.done.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test]
    async fn made_once_then_again_after_forget() {
        let once = SchemaOnce::default();
        let made = AtomicUsize::new(0);
        let make = || async {
            made.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        once.ensure(make).await.unwrap();
        once.ensure(make).await.unwrap();
        assert_eq!(made.load(Ordering::SeqCst), 1);
        once.forget();
        once.ensure(make).await.unwrap();
        assert_eq!(made.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_make_is_tried_again() {
        let once = SchemaOnce::default();
        let err = once
            .ensure(|| async { Err(lock_core::Error::invalid("no")) })
            .await;
        assert!(err.is_err());
        assert!(!once.is_done());
        once.ensure(|| async { Ok(()) }).await.unwrap();
        assert!(once.is_done());
    }
}
