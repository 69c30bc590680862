//! Which tokens a backend last obtained shared holds for: their prolongs and releases go
//! to the client's path (the [storage adapter](crate::backend::storage)) at once, instead
//! of asking the server's routine first and hearing [`Verdict::Defer`](super::Verdict::Defer).
//! A read or semaphore cycle then saves a round trip per call.
//!
//! Only a hint, never a decision: a token missing here (obtained by another process, or
//! forgotten because the set was full) takes the long way, through the routine; a token
//! here whose hold has become exclusive since (an upgrade whose answer was lost) goes to
//! the client's path, which decides any record by the rules. A stale entry costs a round
//! trip, never a wrong answer.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::backend::storage::{self, Storage};
use crate::backend::{ObtainRequest, ProlongRequest, ReleaseRequest, Token};
use crate::{Key, ObtainOutcome, ProlongOutcome, ReleaseOutcome, Result};

/// The (key, token) pairs with a shared hold obtained through this backend, at most
/// [`SharedTokens::CAPACITY`] of them.
#[derive(Debug, Default)]
pub(super) struct SharedTokens {
    pairs: Mutex<HashSet<(Key, Token)>>,
}

impl SharedTokens {
    /// The most pairs kept: past it the set starts over, so that pairs of holds that
    /// expired without a release cannot fill it for good.
    pub(super) const CAPACITY: usize = 65_536;

    /// Whether `token` last obtained a shared hold of `key` here.
    pub(super) fn is_shared(&self, key: &Key, token: &Token) -> bool {
        self.pairs().contains(&(key.clone(), *token))
    }

    /// `token` holds `key` shared now (or, with `shared` false, exclusively).
    pub(super) fn record(&self, key: &Key, token: &Token, shared: bool) {
        let mut pairs = self.pairs();
        if !shared {
            pairs.remove(&(key.clone(), *token));
        } else {
            // Holds that expired unreleased are never forgotten one by one: when full, start
            // over (each forgotten pair costs its next call one round trip).
            if pairs.len() >= Self::CAPACITY {
                pairs.clear();
            }
            pairs.insert((key.clone(), *token));
        }
    }

    /// `token` holds nothing of `key` any more.
    pub(super) fn forget(&self, key: &Key, token: &Token) {
        self.pairs().remove(&(key.clone(), *token));
    }

    /// An obtain on the client's path (a shared request, or a mode change), noted: a token
    /// that now holds shared is recorded, one that now holds exclusively forgotten.
    ///
    /// # Errors
    /// As [`storage::obtain`].
    pub(super) async fn obtain<S: Storage>(
        &self,
        storage: &S,
        req: ObtainRequest<'_>,
    ) -> Result<ObtainOutcome> {
        let outcome = storage::obtain(storage, req).await?;
        if matches!(
            outcome,
            ObtainOutcome::Acquired { .. } | ObtainOutcome::Reacquired { .. }
        ) {
            self.record(req.key, req.token, req.mode.is_shared());
        }
        Ok(outcome)
    }

    /// A prolong of a hold this backend obtained shared, on the client's path (the pair
    /// forgotten when the hold is lost); `None` for any other, which goes to the routine.
    pub(super) async fn prolongate<S: Storage>(
        &self,
        storage: &S,
        req: ProlongRequest<'_>,
    ) -> Option<Result<ProlongOutcome>> {
        if !self.is_shared(req.key, req.token) {
            return None;
        }
        let outcome = storage::prolongate(storage, req).await;
        if matches!(outcome, Ok(ProlongOutcome::Lost)) {
            self.forget(req.key, req.token);
        }
        Some(outcome)
    }

    /// A release of a hold this backend obtained shared, on the client's path (the pair
    /// forgotten unless a reentrant hold remains); `None` for any other, which goes to the
    /// routine.
    pub(super) async fn release<S: Storage>(
        &self,
        storage: &S,
        req: ReleaseRequest<'_>,
    ) -> Option<Result<ReleaseOutcome>> {
        if !self.is_shared(req.key, req.token) {
            return None;
        }
        let outcome = storage::release(storage, req).await;
        if matches!(&outcome, Ok(o) if !matches!(o, ReleaseOutcome::Decremented { .. })) {
            self.forget(req.key, req.token);
        }
        Some(outcome)
    }

    fn pairs(&self) -> std::sync::MutexGuard<'_, HashSet<(Key, Token)>> {
        // A panic while holding the lock cannot leave the set half-changed: use it.
        self.pairs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_keeps_shared_pairs_forgets_exclusive_ones_and_starts_over_when_full() {
        let hint = SharedTokens::default();
        let (a, b) = (Key::new("a").unwrap(), Key::new("b").unwrap());
        let t = Token::generate().unwrap();
        hint.record(&a, &t, true);
        assert!(hint.is_shared(&a, &t));
        assert!(!hint.is_shared(&b, &t), "per key");
        hint.record(&a, &t, false);
        assert!(!hint.is_shared(&a, &t), "an upgrade forgets it");
        hint.record(&a, &t, true);
        hint.forget(&a, &t);
        assert!(!hint.is_shared(&a, &t), "a release forgets it");
        let first = Token::generate().unwrap();
        hint.record(&b, &first, true);
        for _ in 1..SharedTokens::CAPACITY {
            hint.record(&a, &Token::generate().unwrap(), true);
        }
        assert_eq!(hint.pairs().len(), SharedTokens::CAPACITY);
        hint.record(&b, &t, true);
        assert!(
            hint.is_shared(&b, &t),
            "full: it starts over with the new pair"
        );
        assert!(!hint.is_shared(&b, &first));
        assert_eq!(hint.pairs().len(), 1);
    }
}
