//! What an obtain that ends without the lock may have left on the key under its token, and
//! how it is taken away: the writer's marker a waiting exclusive obtain may leave on a key
//! held shared, and the grant of an attempt that failed after the backend may have applied
//! it (its reply lost: a timeout, a cut connection).

use std::future::Future;
use std::sync::Arc;

use crate::client::detached::{give_back_detached, in_background, GiveBack};
use crate::client::turn::Calls;
use crate::{Attempt, BusyReason, Key, LockGuard, Result, Token};

/// A waiting writer's marker that its wait may have left on the key: taken away (a
/// release by the wait's token, which holds nothing then) when the wait ends without the
/// lock, or from a task of its own if the wait is dropped; left alone once the lock is
/// obtained (the grant took it away, and a release would free the lock).
///
/// Only an attempt answered busy because of shared holds leaves a marker (or one whose
/// answer never came: it may have), so a wait that only ever met an exclusive holder costs
/// no release when it gives up. An attempt that failed with an error the backend may have
/// applied anyway arms it too, queueing or not: an obtain that returns an error leaves no
/// hold behind under a token nobody has, once the give-back (in the background, when the
/// attempts did not queue) has run; `lock_all` then leaves none of its keys held.
pub(super) struct Marker<'a> {
    /// Borrowed: cloned only to send the release, so a wait costs no allocation for it.
    pub(super) target: Option<(&'a Arc<dyn crate::LockBackend>, &'a Key, &'a Token)>,
    /// The token's calls: the release waits for an attempt still in flight.
    pub(super) calls: &'a Calls,
    /// The attempts queue: each may leave a writer's marker while it is in flight.
    pub(super) queue: bool,
    /// An attempt may have left a marker or a grant on the key.
    pub(super) maybe_left: bool,
}

/// Whether a failed obtain may have been applied by the backend all the same: not when it
/// was refused before any write (bad input, configuration, a permission, a corrupt record).
fn may_have_applied(e: &crate::Error) -> bool {
    use crate::ErrorKind;
    !matches!(
        e.kind(),
        ErrorKind::InvalidInput
            | ErrorKind::Config
            | ErrorKind::PermissionDenied
            | ErrorKind::Corrupt
            | ErrorKind::ExpiredOnArrival
    )
}

impl Marker<'_> {
    /// Around one attempt: while it is in flight it may leave a marker; once answered, it
    /// did if it was busy because of shared holds, or failed (it may have been applied, and
    /// left a grant too).
    pub(super) async fn around<F: Future<Output = Result<Attempt<LockGuard>>>>(
        &mut self,
        attempt: F,
    ) -> Result<Attempt<LockGuard>> {
        if self.target.is_none() {
            return attempt.await;
        }
        let before = self.maybe_left;
        // A grant in flight when the wait is dropped is given back by the call itself (its
        // unread grant); a marker in flight is not.
        self.maybe_left = before || self.queue;
        let answer = attempt.await;
        self.maybe_left = before
            || match &answer {
                Ok(Attempt::Busy(busy)) => self.queue && busy.reason == BusyReason::Shared,
                Ok(Attempt::Obtained(_)) => false,
                Err(e) => may_have_applied(e),
            };
        answer
    }

    /// The wait obtained the lock: nothing to take away.
    pub(super) fn disarm(mut self) {
        self.target = None;
    }

    /// What to release, if a marker may be there.
    fn armed(&mut self) -> Option<(Arc<dyn crate::LockBackend>, Key, Token)> {
        let (backend, key, token) = self.target.take()?;
        self.maybe_left
            .then(|| (Arc::clone(backend), key.clone(), *token))
    }

    /// The wait ended without the lock: takes the marker away now. A grant an attempt
    /// that failed may have left (no marker: the attempts did not queue) is given back in
    /// the background instead, when `self` drops: the caller's error is not held back by
    /// one more call (in a partition, a second deadline), and [`crate::settle`] waits for
    /// it.
    pub(super) async fn take_away(mut self) {
        if !self.queue {
            return;
        }
        if let Some((backend, key, token)) = self.armed() {
            let _turn = self.calls.turn().await;
            if let Err(e) = give_back_detached(&backend, &key, &token, GiveBack::AllHolds).await {
                tracing::debug!(
                    "could not take the writer's marker away, it lapses with its ttl: {e}"
                );
            }
        }
    }
}

impl Drop for Marker<'_> {
    fn drop(&mut self) {
        let Some((backend, key, token)) = self.armed() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let calls = self.calls.clone();
            in_background(&runtime, async move {
                let _turn = calls.turn().await;
                let _ = give_back_detached(&backend, &key, &token, GiveBack::AllHolds).await;
            });
        }
    }
}
