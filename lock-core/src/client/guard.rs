//! The guard a caller holds while it owns a lock.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tracing::Instrument;

mod modes;
mod reenter;

use crate::client::clock;
use crate::client::detached::{detached, in_background};
use crate::client::hold::{Grant, Hold};
use crate::client::registry::{Claim, Registry};
use crate::observe::HoldEnd;
use crate::{
    Error, Fencing, Key, Mode, ProlongOutcome, ProlongRequest, ReleaseOutcome, Result, Ttl,
};

/// Proof that the caller holds a lock, from [`LockBuilder`](crate::LockBuilder).
///
/// Give it back with [`LockGuard::release`]. Dropped while still held, it releases the lock in
/// the background (when a tokio runtime is there) and logs a warning either way; with no
/// runtime the lock expires after its ttl.
///
/// The critical section should select on [`LockGuard::lost`] and pass
/// [`LockGuard::fencing`] to the resource it writes, so that a write made after the lock was
/// lost is refused.
///
/// # Validity
/// [`LockGuard::remaining`] counts from the local monotonic clock read *before* the request
/// that obtained or last prolonged the lock was sent, so it errs on the safe side and never
/// depends on comparing two machines' wall clocks.
///
/// # Calls in flight
/// A call whose caller stopped waiting (a `timeout`, a `select!`, a dropped task) still
/// runs to its end: what was sent may be applied. Calls of one guard (and of the guards
/// [`reenter`](LockGuard::reenter)ed from it, which share its owner token) may also travel
/// over different connections and land in another order than they were sent. So:
/// - [`reenter`](LockGuard::reenter), [`downgrade`](LockGuard::downgrade),
///   [`upgrade`](LockGuard::upgrade) and [`release`](LockGuard::release) (a dropped guard's
///   release too) go out one at a time per token: each waits until the one before it has
///   landed, and, if that one's caller gave up, until what it left was cleaned up (a
///   reentrant grant nobody read is given back first). Each backend call has a deadline, so
///   the wait ends. A release therefore frees the key whatever mode a cut-off change left it
///   in, and a mode change never meets a reentrant obtain landing after it.
/// - [`prolongate`](LockGuard::prolongate) and the watchdog's renewals do not wait: any
///   number may be in flight beside the calls above. A prolong moves the expiry of whatever
///   the token holds and changes no mode or count, and the validity follows the shortest
///   lease any of them may have set.
pub struct LockGuard {
    claim: Arc<Claim>,
    registry: Arc<Registry>,
}

impl LockGuard {
    /// The guard of a fresh acquisition, registered, and on the watchdog's queue when
    /// `watchdog` is set.
    pub(crate) fn new(grant: Grant, registry: &Arc<Registry>, watchdog: Option<f64>) -> Self {
        let hold = Hold::new(grant, watchdog);
        registry.renewals.schedule(&hold);
        LockGuard {
            claim: registry.insert(hold),
            registry: Arc::clone(registry),
        }
    }

    pub(super) fn hold(&self) -> &Arc<Hold> {
        &self.claim.hold
    }

    /// Restarts what keeps this guard's lost signal on time (the expiry timer, the
    /// watchdog's task) if it ended with the runtime that ran it.
    pub(super) fn keep_watch(&self) {
        let hold = self.hold();
        hold.arm_timer();
        if hold.watchdog.is_some() {
            self.registry.renewals.ensure_running();
        }
    }

    /// The locked key, without the locker's prefix.
    pub fn key(&self) -> &Key {
        &self.hold().key
    }

    /// How this lock shares its key: exclusive, or shared (a semaphore's permits, a read
    /// hold).
    pub fn mode(&self) -> Mode {
        self.hold().mode()
    }

    /// The fencing token of this acquisition: pass it to the resource you protect. Each
    /// shared hold has its own; [`LockGuard::upgrade`] gets a fresh one.
    pub fn fencing(&self) -> Fencing {
        self.hold().fencing()
    }

    /// Time left before the lock expires unless prolonged, by the local monotonic clock,
    /// which here counts the time the machine spent suspended (conservative: counted from
    /// before the last successful request was sent, and never past the shortest lease a
    /// prolong in flight or one that failed may have set).
    pub fn remaining(&self) -> Duration {
        self.hold().until().saturating_duration_since(clock::now())
    }

    /// Whether the lock is known to be lost: a prolong or release answered `Lost`, or its
    /// validity ([`LockGuard::remaining`]) ran out before a prolong renewed it. Once lost,
    /// always lost, even if a late prolong then answers `ProlongedLate`.
    pub fn is_lost(&self) -> bool {
        self.hold().is_lost()
    }

    /// Resolves the moment the lock is known to be lost; at once if it already is. Never
    /// resolves on a normal release.
    ///
    /// It is never late: it fires when a prolong or release answers `Lost`, and in any case
    /// when the validity runs out (the ttl counted from the moment the request that granted
    /// or last prolonged the lock was *sent*), even while a watchdog's prolong is still in
    /// flight. That moment comes before the backend can grant the lock to anyone else, by
    /// its own clock, as long as the two clocks run at the same rate; timer resolution adds
    /// about a millisecond.
    ///
    /// The future may be made anywhere, even outside a Tokio runtime; it keeps time once it
    /// is polled in one.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use lock_core::{Locker, MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// # let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let guard = locker.lock("job").watchdog().obtain().await?.obtained().unwrap();
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("lock lost, stopping"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => println!("work done"),
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: the future only waits; drop it and call again at will.
    pub fn lost(&self) -> LostFuture {
        LostFuture {
            hold: Arc::clone(self.hold()),
            registry: Arc::clone(&self.registry),
            wait: Box::pin(self.hold().lost_token().cancelled_owned()),
            armed: false,
        }
    }

    /// The lost signal as a [`CancellationToken`], to hand to other tasks. It fires under
    /// the same rules as [`LockGuard::lost`].
    ///
    /// Taken outside a Tokio runtime, the token fires on a `Lost` answer, but fires at the
    /// validity's end only once the guard is used inside a runtime ([`LockGuard::lost`],
    /// [`LockGuard::prolongate`], [`LockGuard::reenter`], or this method again). It never
    /// panics.
    pub fn lost_token(&self) -> CancellationToken {
        let token = self.hold().lost_token();
        self.keep_watch();
        token
    }

    /// Extends the lock to `ttl` from now: longer or shorter than before, and the validity
    /// ([`LockGuard::remaining`]), the lost signal and the watchdog's next renewal follow it
    /// (a watched guard is renewed with the new ttl from then on).
    ///
    /// `Lost` fires [`LockGuard::lost`]; `ProlongedLate` is logged as a warning. A guard
    /// detached by [`LockGuard::reenter`] sends nothing and answers `Lost`. A prolong
    /// that fails may have been applied: the validity then becomes no longer than `ttl`
    /// from the moment it was sent.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a ttl out of range,
    /// or the backend's error.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have prolonged the lock; the guard counts its
    /// validity as the shorter of the two, and calling again is safe.
    pub async fn prolongate(&self, ttl: Duration) -> Result<ProlongOutcome> {
        let ttl = Ttl::new(ttl)?;
        let hold = self.hold();
        if hold.is_detached() {
            // The token now holds a fresh acquisition, which is not this guard's to prolong.
            return Ok(ProlongOutcome::Lost);
        }
        self.keep_watch();
        let _retime = Retime::new(self);
        let ticket = hold.begin(ttl);
        let req = ProlongRequest {
            key: &hold.key,
            token: &hold.token,
            ttl,
        };
        match hold.backend.prolongate(req).await {
            Ok(outcome) => {
                ticket.finish(Some(outcome));
                Ok(outcome)
            }
            Err(e) => {
                ticket.finish(None);
                hold.telemetry.call_failed(&hold.key, &e);
                Err(e)
            }
        }
    }

    /// Gives the lock back.
    ///
    /// # Errors
    /// The backend's error; the lock then expires after its ttl at the latest.
    ///
    /// # Cancel safety
    /// Cancel safe: the release runs in a task of its own and completes even if this future
    /// is dropped (for example by a `select!` on a shutdown signal). It goes out after the
    /// guard's earlier calls that are still running (see "Calls in flight" on
    /// [`LockGuard`]), so it frees the key whatever they leave. Before the process exits,
    /// [`settle`](crate::settle) waits for a release left running in the background.
    pub async fn release(self) -> Result<ReleaseOutcome> {
        self.release_with(None).await
    }

    /// Gives the lock back and keeps the key cooling down for `delay`: every obtain, this
    /// owner's included, is busy until it ends. Ignored when reentrant holds remain.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a delay out of
    /// range, or the backend's error.
    ///
    /// # Cancel safety
    /// As for [`LockGuard::release`].
    pub async fn release_after(self, delay: Duration) -> Result<ReleaseOutcome> {
        let delay = Ttl::new(delay)?;
        self.release_with(Some(delay)).await
    }

    async fn release_with(self, delay: Option<Ttl>) -> Result<ReleaseOutcome> {
        let Some(given) = self.registry.give_back(&self.claim) else {
            // Already given back by `Locker::release_all`.
            return Ok(ReleaseOutcome::Lost);
        };
        let span = tracing::debug_span!("lock.release", backend = self.hold().backend.name(), key = %self.hold().key);
        let call = async move { given.release(delay).await };
        detached(call.instrument(span)).await
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self.hold(), f)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(given) = self.registry.give_back(&self.claim) else {
            return;
        };
        if given.hold().is_detached() {
            return;
        }
        if given.is_last() {
            given.hold().mark_dropped();
        }
        let key = given.hold().key.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                tracing::warn!(%key, "lock guard dropped while held: releasing it in the background");
                in_background(&runtime, async move {
                    if let Err(e) = given.release(None).await {
                        tracing::warn!(%key, "background release failed, the lock expires after its ttl: {e}");
                    }
                });
            }
            Err(_) => {
                tracing::warn!(%key, "lock guard dropped while held outside a tokio runtime: it expires after its ttl");
                if given.is_last() {
                    given.hold().end(HoldEnd::Dropped);
                }
            }
        }
    }
}

/// Moves a watched hold's next renewal to match its validity once a call by hand changed
/// it, however that call ends (answered, failed, cancelled).
pub(super) struct Retime {
    hold: Arc<Hold>,
    registry: Arc<Registry>,
}

impl Retime {
    pub(super) fn new(guard: &LockGuard) -> Self {
        Retime {
            hold: Arc::clone(guard.hold()),
            registry: Arc::clone(&guard.registry),
        }
    }
}

impl Drop for Retime {
    fn drop(&mut self) {
        if !self.hold.is_marked_lost() {
            self.registry.renewals.schedule(&self.hold);
        }
    }
}

/// What [`LockGuard::lost`] returns: resolves when the lock is known to be lost.
///
/// On its first poll it starts what keeps it on time (the expiry timer, the watchdog) on
/// the runtime that polls it, if none runs.
pub struct LostFuture {
    hold: Arc<Hold>,
    registry: Arc<Registry>,
    wait: Pin<Box<WaitForCancellationFutureOwned>>,
    armed: bool,
}

impl Future for LostFuture {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.armed {
            self.armed = true;
            self.hold.arm_timer();
            if self.hold.watchdog.is_some() {
                self.registry.renewals.ensure_running();
            }
        }
        self.wait.as_mut().poll(cx)
    }
}

impl fmt::Debug for LostFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostFuture")
            .field("key", &self.hold.key)
            .finish_non_exhaustive()
    }
}

/// Validates a watchdog fraction.
pub(crate) fn check_fraction(fraction: f64) -> Result<f64> {
    if fraction > 0.0 && fraction < 1.0 {
        Ok(fraction)
    } else {
        Err(Error::invalid(format!(
            "a watchdog prolongs at a fraction of the ttl strictly between 0 and 1, got {fraction}"
        )))
    }
}
