//! The guard a caller holds while it owns a lock, and its watchdog.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tracing::Instrument;

use crate::detached::{detached, GiveBack, Obtain};
use crate::renew::{Renewals, Slot};
use crate::{
    Attempt, Error, Fencing, HolderInfo, Key, LockBackend, ObtainOutcome, ProlongOutcome,
    ProlongRequest, ReleaseOutcome, ReleaseRequest, Result, Token, Ttl,
};

/// The locks a [`Locker`](crate::Locker) still holds, for `release_all`.
///
/// A slab rather than a map: a guard's id is its slot, so registering and deregistering on
/// every obtain and release cost no hashing.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    slab: Mutex<Slab>,
    /// When each watched guard renews next: the watchdog (renew.rs).
    pub(crate) renewals: Renewals,
}

#[derive(Debug, Default)]
struct Slab {
    slots: Vec<Option<Arc<Shared>>>,
    free: Vec<usize>,
    len: usize,
}

impl Registry {
    fn insert(&self, make: impl FnOnce(usize) -> Arc<Shared>) -> Arc<Shared> {
        let mut slab = lock(&self.slab);
        let id = match slab.free.pop() {
            Some(id) => id,
            None => {
                slab.slots.push(None);
                slab.slots.len() - 1
            }
        };
        let shared = make(id);
        slab.slots[id] = Some(Arc::clone(&shared));
        slab.len += 1;
        shared
    }

    fn remove(&self, id: usize) {
        let mut slab = lock(&self.slab);
        if slab.slots.get_mut(id).and_then(Option::take).is_some() {
            slab.free.push(id);
            slab.len -= 1;
        }
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.slab).len
    }

    /// Takes every guard still registered; each is marked released so that its own
    /// `release` or drop does nothing more.
    pub(crate) fn drain(&self) -> Vec<Arc<Shared>> {
        let all: Vec<_> = {
            let mut slab = lock(&self.slab);
            let all = slab.slots.drain(..).flatten().collect();
            slab.free.clear();
            slab.len = 0;
            all
        };
        all.into_iter().filter(|s| s.take_for_release()).collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a guard and its watchdog share.
pub(crate) struct Shared {
    id: usize,
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) key: Key,
    pub(crate) token: Token,
    pub(crate) fencing: Fencing,
    holder: Arc<HolderInfo>,
    state: Mutex<Validity>,
    /// Given back (by its own release, its drop, or `release_all`): nothing more to do.
    released: AtomicBool,
    /// Cancelled when the guard is given back: stops its expiry timer.
    stop: CancellationToken,
    /// The watchdog's period as a fraction of the ttl, when the locker's watchdog keeps the
    /// validity (and so fires `lost` when it runs out).
    pub(crate) watchdog: Option<f64>,
    /// Where the guard waits in the watchdog's queue (only touched under its lock).
    pub(crate) renew_slot: Mutex<Slot>,
    registry: Weak<Registry>,
}

#[derive(Debug)]
struct Validity {
    /// By the local monotonic clock, read before the request that set it was sent.
    until: Instant,
    ttl: Ttl,
    lost: LostSignal,
}

/// The lost signal, made only when someone listens: most guards are released without
/// anyone asking, and a cancellation token is an allocation.
#[derive(Debug)]
struct LostSignal {
    lost: bool,
    token: Option<CancellationToken>,
}

impl LostSignal {
    /// The token, and whether it was made just now.
    fn token(&mut self) -> (CancellationToken, bool) {
        if let Some(token) = &self.token {
            return (token.clone(), false);
        }
        let token = CancellationToken::new();
        if self.lost {
            token.cancel();
        }
        self.token = Some(token.clone());
        (token, true)
    }

    /// Marks it lost; true the first time.
    fn fire(&mut self) -> bool {
        if let Some(token) = &self.token {
            token.cancel();
        }
        !std::mem::replace(&mut self.lost, true)
    }
}

impl Shared {
    /// Marks the guard released, and takes it off the watchdog's queue; false when it
    /// already was (by `release_all` or itself).
    fn take_for_release(&self) -> bool {
        self.stop.cancel();
        let first = !self.released.swap(true, Ordering::AcqRel);
        if first && self.watchdog.is_some() {
            if let Some(registry) = self.registry.upgrade() {
                registry.renewals.remove(self);
            }
        }
        first
    }

    /// Whether it was given back (released, dropped, or by `release_all`).
    pub(crate) fn is_given_back(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Whether the lost signal fired (not counting a validity that ran out unseen).
    pub(crate) fn is_marked_lost(&self) -> bool {
        lock(&self.state).lost.lost
    }

    fn deregister(&self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.remove(self.id);
        }
    }

    pub(crate) fn until(&self) -> Instant {
        lock(&self.state).until
    }

    pub(crate) fn ttl(&self) -> Ttl {
        lock(&self.state).ttl
    }

    /// The lost signal; made on first use, together with the timer that fires it when the
    /// validity runs out (a watchdog guard's watchdog does that itself).
    fn lost_token(self: &Arc<Self>) -> CancellationToken {
        let (token, fresh) = lock(&self.state).lost.token();
        if fresh && self.watchdog.is_none() {
            spawn_expiry_timer(Arc::clone(self));
        }
        token
    }

    /// Whether the lock is lost, its validity having run out counting as lost.
    fn is_lost(&self) -> bool {
        let expired = {
            let state = lock(&self.state);
            if state.lost.lost {
                return true;
            }
            state.until <= Instant::now()
        };
        if expired && !self.released.load(Ordering::Acquire) {
            self.mark_lost("its validity ran out before it was prolonged");
            return true;
        }
        false
    }

    /// Extends the validity to `ttl` from `sent_at` (never shortens it).
    fn renewed(&self, sent_at: Instant, ttl: Ttl) {
        let mut state = lock(&self.state);
        state.until = state.until.max(sent_at + ttl.as_duration());
        state.ttl = ttl;
    }

    pub(crate) fn mark_lost(&self, why: &str) {
        if lock(&self.state).lost.fire() {
            tracing::warn!(key = %self.key, fencing = %self.fencing, backend = self.backend.name(), "lock lost: {why}");
        }
    }

    async fn prolongate(&self, ttl: Ttl) -> Result<ProlongOutcome> {
        let sent_at = Instant::now();
        let req = ProlongRequest {
            key: &self.key,
            token: &self.token,
            ttl,
        };
        let outcome = self.backend.prolongate(req).await?;
        self.apply(outcome, sent_at, ttl);
        Ok(outcome)
    }

    /// Takes in the answer of a prolong to `ttl` sent at `sent_at`.
    pub(crate) fn apply(&self, outcome: ProlongOutcome, sent_at: Instant, ttl: Ttl) {
        match outcome {
            ProlongOutcome::Prolonged => self.renewed(sent_at, ttl),
            ProlongOutcome::ProlongedLate => {
                tracing::warn!(key = %self.key, fencing = %self.fencing, "prolonged late: the lock had expired, nobody took it meanwhile");
                self.renewed(sent_at, ttl);
            }
            ProlongOutcome::Lost => self.mark_lost("a prolong answered Lost"),
        }
    }

    pub(crate) async fn release(&self, delay_after: Option<Ttl>) -> Result<ReleaseOutcome> {
        self.deregister();
        let req = ReleaseRequest {
            key: &self.key,
            token: &self.token,
            delay_after,
        };
        let outcome = self.backend.release(req).await?;
        match outcome {
            ReleaseOutcome::Lost => self.mark_lost("the release answered Lost"),
            ReleaseOutcome::ReleasedLate => {
                tracing::warn!(key = %self.key, fencing = %self.fencing, "released late: the lock had expired before the release")
            }
            ReleaseOutcome::Released | ReleaseOutcome::Decremented { .. } => {}
        }
        Ok(outcome)
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("backend", &self.backend.name())
            .field("key", &self.key)
            .field("token", &self.token)
            .field("fencing", &self.fencing)
            .field("lost", &lock(&self.state).lost.lost)
            .finish()
    }
}

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
pub struct LockGuard {
    shared: Arc<Shared>,
}

impl LockGuard {
    pub(crate) fn new(
        shared_parts: GuardParts,
        registry: &Arc<Registry>,
        watchdog: Option<f64>,
    ) -> Self {
        let GuardParts {
            backend,
            key,
            token,
            fencing,
            holder,
            sent_at,
            ttl,
            lost,
        } = shared_parts;
        let shared_lost = lost.is_some();
        let shared = registry.insert(|id| {
            Arc::new(Shared {
                id,
                backend,
                key,
                token,
                fencing,
                holder,
                state: Mutex::new(Validity {
                    until: sent_at + ttl.as_duration(),
                    ttl,
                    lost: LostSignal {
                        lost: false,
                        token: lost,
                    },
                }),
                released: AtomicBool::new(false),
                stop: CancellationToken::new(),
                watchdog,
                renew_slot: Mutex::new(None),
                registry: Arc::downgrade(registry),
            })
        });
        match watchdog {
            Some(_) => Renewals::schedule(registry, &shared, sent_at),
            // A shared lost signal (a reentrant guard's) already has listeners.
            None if shared_lost => spawn_expiry_timer(Arc::clone(&shared)),
            None => {}
        }
        LockGuard { shared }
    }

    /// Obtains the same lock again with the same owner token: a reentrant hold.
    ///
    /// The new guard shares this one's fencing token and lost signal; each guard gives back
    /// one hold, and the lock is free once both are released. If this guard's hold had
    /// expired meanwhile and nobody took the key, the answer is a fresh acquisition with a
    /// new fencing token: the expired hold no longer counts, so this guard is then detached
    /// (lost, and its release does nothing) and the new guard is the only holder.
    ///
    /// # Errors
    /// The backend's error.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future gives back the hold it may have been granted, after
    /// the grant (the obtain finishes in a task of its own).
    pub async fn reenter(&self) -> Result<Attempt<LockGuard>> {
        let shared = &self.shared;
        let registry = shared.registry.upgrade().unwrap_or_default();
        let ttl = shared.ttl();
        let sent_at = Instant::now();
        let call = Obtain {
            backend: Arc::clone(&shared.backend),
            key: shared.key.clone(),
            token: shared.token,
            ttl,
            holder: Arc::clone(&shared.holder),
        };
        let (fencing, lost) = match call.run(GiveBack::OneHold).await? {
            ObtainOutcome::Reacquired { .. } => {
                // The backend reset the lock's ttl: this guard's validity grows with it.
                shared.renewed(sent_at, ttl);
                (shared.fencing, Some(shared.lost_token()))
            }
            ObtainOutcome::Acquired { fencing, .. } => {
                // Same token, so this guard's release would free the new holder's lock.
                if shared.take_for_release() {
                    shared.deregister();
                }
                shared.mark_lost("it expired, and reenter() obtained the lock afresh");
                (fencing, None)
            }
            ObtainOutcome::Busy(busy) => return Ok(Attempt::Busy(busy)),
        };
        let parts = GuardParts {
            backend: Arc::clone(&shared.backend),
            key: shared.key.clone(),
            token: shared.token,
            fencing,
            holder: Arc::clone(&shared.holder),
            sent_at,
            ttl,
            lost,
        };
        Ok(Attempt::Obtained(LockGuard::new(parts, &registry, None)))
    }

    /// The locked key, without the locker's prefix.
    pub fn key(&self) -> &Key {
        &self.shared.key
    }

    /// The fencing token of this acquisition: pass it to the resource you protect.
    pub fn fencing(&self) -> Fencing {
        self.shared.fencing
    }

    /// Time left before the lock expires unless prolonged, by the local monotonic clock
    /// (conservative: counted from before the last successful request was sent).
    pub fn remaining(&self) -> Duration {
        self.shared
            .until()
            .saturating_duration_since(Instant::now())
    }

    /// Whether the lock is known to be lost: a prolong or release answered `Lost`, or its
    /// validity ([`LockGuard::remaining`]) ran out before a prolong renewed it. Once lost,
    /// always lost, even if a late prolong then answers `ProlongedLate`.
    pub fn is_lost(&self) -> bool {
        self.shared.is_lost()
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
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.shared.lost_token().cancelled_owned()
    }

    /// The lost signal as a [`CancellationToken`], to hand to other tasks. It fires under
    /// the same rules as [`LockGuard::lost`].
    pub fn lost_token(&self) -> CancellationToken {
        self.shared.lost_token()
    }

    /// Extends the lock to `ttl` from now.
    ///
    /// `Lost` fires [`LockGuard::lost`]; `ProlongedLate` is logged as a warning.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a ttl out of range, or
    /// the backend's error.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have prolonged the lock; either way the guard
    /// still holds it until [`LockGuard::remaining`] runs out, and calling again is safe.
    pub async fn prolongate(&self, ttl: Duration) -> Result<ProlongOutcome> {
        let ttl = Ttl::new(ttl)?;
        self.shared.prolongate(ttl).await
    }

    /// Gives the lock back.
    ///
    /// # Errors
    /// The backend's error; the lock then expires after its ttl at the latest.
    ///
    /// # Cancel safety
    /// Cancel safe: the release runs in a task of its own and completes even if this future
    /// is dropped (for example by a `select!` on a shutdown signal).
    pub async fn release(self) -> Result<ReleaseOutcome> {
        self.release_with(None).await
    }

    /// Gives the lock back and keeps the key cooling down for `delay`: every obtain, this
    /// owner's included, is busy until it ends. Ignored when reentrant holds remain.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a delay out of range,
    /// or the backend's error.
    ///
    /// # Cancel safety
    /// As for [`LockGuard::release`].
    pub async fn release_after(self, delay: Duration) -> Result<ReleaseOutcome> {
        let delay = Ttl::new(delay)?;
        self.release_with(Some(delay)).await
    }

    async fn release_with(self, delay: Option<Ttl>) -> Result<ReleaseOutcome> {
        if !self.shared.take_for_release() {
            // Already given back by `Locker::release_all`.
            return Ok(ReleaseOutcome::Lost);
        }
        let span = tracing::debug_span!("lock.release", backend = self.shared.backend.name(), key = %self.shared.key);
        let shared = Arc::clone(&self.shared);
        let call = async move { shared.release(delay).await };
        detached(call.instrument(span)).await
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.shared, f)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.shared.take_for_release() {
            return;
        }
        self.shared.deregister();
        let shared = Arc::clone(&self.shared);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                tracing::warn!(key = %shared.key, "lock guard dropped while held: releasing it in the background");
                runtime.spawn(async move {
                    if let Err(e) = shared.release(None).await {
                        tracing::warn!(key = %shared.key, "background release failed, the lock expires after its ttl: {e}");
                    }
                });
            }
            Err(_) => {
                tracing::warn!(key = %shared.key, "lock guard dropped while held outside a tokio runtime: it expires after its ttl");
            }
        }
    }
}

/// The pieces a new guard is built from.
pub(crate) struct GuardParts {
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) key: Key,
    pub(crate) token: Token,
    pub(crate) fencing: Fencing,
    pub(crate) holder: Arc<HolderInfo>,
    pub(crate) sent_at: Instant,
    pub(crate) ttl: Ttl,
    /// The lost signal to share (a reentrant guard shares its parent's).
    pub(crate) lost: Option<CancellationToken>,
}

/// Fires the lost signal of a guard without a watchdog when its validity runs out, unless
/// a prolong moved it first; stops when the guard is given back.
fn spawn_expiry_timer(shared: Arc<Shared>) {
    tokio::spawn(async move {
        loop {
            let until = shared.until();
            tokio::select! {
                _ = shared.stop.cancelled() => return,
                _ = tokio::time::sleep_until(until) => {}
            }
            if shared.until() <= Instant::now() {
                if !shared.released.load(Ordering::Acquire) {
                    shared.mark_lost("its validity ran out before it was prolonged");
                }
                return;
            }
        }
    });
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
