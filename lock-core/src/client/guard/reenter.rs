//! A reentrant obtain by a guard: [`LockGuard::reenter`].

use std::sync::Arc;

use super::{LockGuard, Retime};
use crate::client::detached::GiveBack;
use crate::client::hold::{Grant, Hold};
use crate::client::registry::Registry;
use crate::observe::{HoldEnd, LostCause};
use crate::{Attempt, Error, ErrorKind, ObtainOutcome, Operation, ProlongOutcome, Result};

impl LockGuard {
    /// Obtains the same lock again with the same owner token: a reentrant hold.
    ///
    /// The new guard shares this one's fencing token, validity, lost signal and watchdog
    /// (a prolong by either, or by the watchdog, renews both: the backend keeps one expiry
    /// per token); each guard gives back one hold, and the lock is free once all are
    /// released. If the hold had expired meanwhile and nobody took the key, the answer is a
    /// fresh acquisition with a new fencing token: the expired hold no longer counts, so
    /// every guard of it (this one and any other reentered from it) is detached: lost, and
    /// its release sends nothing, since it would free the fresh acquisition made with the
    /// same token. The new guard is then the only holder. A `Busy` answer means another
    /// token holds the key: this guard's lock is lost, and its lost signal fires.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when this guard was detached (a reentrant obtain replaced
    /// its expired hold: reenter from the guard that holds the fresh one), or when a mode
    /// change of it never got its answer (the backend may hold it in either mode); or the
    /// backend's error.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future gives back the hold it may have been granted, after
    /// the grant (the obtain finishes in a task of its own). The validity of this guard then
    /// counts as if the obtain had reset the ttl (it may have). See [`LockGuard`]'s "Calls in
    /// flight" for what waits for that obtain.
    pub async fn reenter(&self) -> Result<Attempt<LockGuard>> {
        let hold = self.hold();
        self.keep_watch();
        if !hold.add_guard() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                hold.backend.name(),
                Operation::Obtain,
                "this guard's lock was lost and replaced by a fresh acquisition with the same \
                 token; reenter from the guard that holds it",
            ));
        }
        // Counted before the call, so that a release of the other guards meanwhile does not
        // end the hold under it; counted out again unless the grant is this hold's.
        let reserved = Reserved {
            hold: Arc::clone(hold),
            registry: Arc::clone(&self.registry),
            armed: true,
        };
        // After every earlier call of the token that changes its holds (a release, a mode
        // change, a reentrant obtain whose caller gave up): see `crate::client::turn`.
        let turn = hold.calls.turn().await;
        if hold.is_unsettled() {
            // The obtain would go out in the mode the guard counts, which the backend may
            // not hold: on an exclusive hold, a shared obtain is a downgrade.
            return Err(Error::new(
                ErrorKind::InvalidInput,
                hold.backend.name(),
                Operation::Obtain,
                "an earlier mode change of this guard never got its answer, so the backend may \
                 hold it in either mode; release it and obtain it anew",
            ));
        }
        // Declared before the ticket, so dropped after it: it re-times the watchdog by the
        // validity the ticket leaves, on every way out of this function.
        let retime = Retime::new(self);
        let ticket = hold.begin(hold.ttl());
        let call = hold.obtain_again(ticket.ttl, hold.mode(), turn);
        // The ticket travels with the obtain: a caller that stops waiting leaves the obtain
        // to finish in the background, and until it lands (it may reset the ttl after a
        // later prolong) the ticket keeps its bound in every overlapping prolong's floor.
        // The turn comes back with the answer and is kept until the answer is taken in.
        let (outcome, ticket, _turn) = call.run_keeping(GiveBack::OneHold, ticket).await;
        let outcome = outcome.inspect_err(|e| hold.telemetry.call_failed(&hold.key, e))?;
        match outcome {
            ObtainOutcome::Reacquired { .. } => {
                // The backend reset the lock's ttl: the validity of every guard grows.
                ticket.finish(Some(ProlongOutcome::Prolonged));
                drop(retime);
                Ok(Attempt::Obtained(reserved.into_guard()))
            }
            ObtainOutcome::Acquired { fencing, .. } => {
                let sent_at = ticket.sent_at;
                let ttl = ticket.ttl;
                drop(reserved);
                let cap = hold.detach("it expired, and reenter() obtained the lock afresh");
                drop((ticket, retime));
                self.registry.renewals.remove(hold);
                self.registry.forget(hold);
                let grant = Grant {
                    backend: Arc::clone(&hold.backend),
                    key: hold.key.clone(),
                    token: hold.token,
                    fencing,
                    holder: Arc::clone(&hold.holder),
                    mode: hold.mode(),
                    sent_at,
                    ttl,
                    cap,
                    telemetry: hold.telemetry.clone(),
                    calls: hold.calls.clone(),
                    parent: tracing::Span::current(),
                };
                Ok(Attempt::Obtained(LockGuard::new(
                    grant,
                    &self.registry,
                    hold.watchdog,
                )))
            }
            ObtainOutcome::Busy(busy) => {
                hold.mark_lost(
                    LostCause::Taken,
                    "a reentrant obtain with its token answered Busy: another token holds the key",
                );
                drop((ticket, reserved, retime));
                Ok(Attempt::Busy(busy))
            }
            ObtainOutcome::Lost => Err(Error::lost_unasked(hold.backend.name())),
        }
    }
}

/// A guard counted in its hold ahead of a reentrant obtain; counted out again when dropped
/// before it became a guard.
struct Reserved {
    hold: Arc<Hold>,
    registry: Arc<Registry>,
    armed: bool,
}

impl Reserved {
    fn into_guard(mut self) -> LockGuard {
        self.armed = false;
        LockGuard {
            claim: self.registry.insert(Arc::clone(&self.hold)),
            registry: Arc::clone(&self.registry),
        }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if self.armed && self.hold.remove_guard() {
            // The other guards were given back while the reentrant obtain was in flight:
            // their releases ended the backend's hold.
            self.hold.end(HoldEnd::Released);
            if self.hold.watchdog.is_some() {
                self.registry.renewals.remove(&self.hold);
            }
        }
    }
}
