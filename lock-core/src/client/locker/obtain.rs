//! One obtain: the builder a caller sets up ([`LockBuilder`]), and the plan it becomes
//! once validated (attempts, waiting with its deadline and retry strategy, the guard).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

mod wait;

use super::marker::Marker;
use super::{Attempt, Locker};
use crate::client::clock;
use crate::client::detached::{give_back_detached, GiveBack, Obtain};
use crate::client::guard::check_fraction;
use crate::client::hold::Grant;
use crate::client::turn::Calls;
use crate::observe::{ObtainEnd, ObtainWatch};
use crate::{
    Error, ErrorKind, HolderInfo, Key, LockGuard, Mode, ObtainOutcome, Operation, Result, Retry,
    Token, Ttl,
};

/// One obtain being set up: from [`Locker::lock`] (or [`Locker::write`]), [`Locker::read`]
/// or [`Locker::semaphore`].
#[must_use = "a lock builder does nothing until try_obtain() or obtain() is awaited"]
pub struct LockBuilder<'a> {
    locker: &'a Locker,
    key: String,
    ttl: Result<Ttl>,
    wait: Duration,
    retry: Retry,
    metadata: Option<String>,
    dont_queue: bool,
    watchdog: Option<Result<f64>>,
    mode: Mode,
    weight: Option<u32>,
}

impl<'a> LockBuilder<'a> {
    /// An obtain of the full key `key` with `locker`'s defaults.
    pub(super) fn new(locker: &'a Locker, key: String) -> Self {
        LockBuilder {
            locker,
            key,
            ttl: Ok(locker.ttl),
            wait: locker.wait,
            retry: locker.retry.clone(),
            metadata: None,
            dont_queue: false,
            watchdog: None,
            mode: Mode::Exclusive,
            weight: None,
        }
    }

    /// The same obtain in `mode` (checked by the obtain).
    pub(super) fn in_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// For a semaphore: take `permits` of its permits instead of 1 (checked by the obtain:
    /// 1 ..= the semaphore's permits; an exclusive lock or a read lock takes none).
    pub fn weight(mut self, permits: u32) -> Self {
        self.weight = Some(permits);
        self
    }

    /// How long the lock stays valid without prolonging (a bad value is reported by the
    /// obtain).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Ttl::new(ttl);
        self
    }

    /// How long [`LockBuilder::obtain`] may wait in all; [`Duration::MAX`] means until
    /// obtained.
    ///
    /// The wait bounds the pauses between attempts; an attempt already sent when the wait
    /// runs out is awaited, and lasts at most the backend's own deadline for one call.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The retry strategy while waiting.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Metadata for this lock, replacing the locker's default.
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }

    /// Gives up at once when the holder's remaining ttl (or the remaining cooldown) is longer
    /// than what is left of the wait: queueing could not succeed.
    pub fn dont_queue(mut self) -> Self {
        self.dont_queue = true;
        self
    }

    /// Prolongs the lock in the background every third of its ttl until the guard is
    /// released or dropped; [`LockGuard::lost`] fires the moment a prolong answers `Lost`,
    /// and in any case when the validity runs out before a prolong renewed it.
    ///
    /// One task per [`Locker`] (and its clones) renews all of its watched locks: locks of
    /// the same ttl come due at the same instants (due times are rounded down onto a grid
    /// of the period) and go out in one
    /// [`LockBackend::prolongate_many`](crate::LockBackend::prolongate_many) call, which the
    /// Redis, Postgres and MariaDB backends send as one pipeline, statement or transaction per
    /// `BATCH` locks. So a
    /// lock's first renewal may come early, anywhere in its first period; after that it
    /// renews once a period. A renewal that fails is retried for that lock alone, every
    /// tenth of its ttl, until its validity runs out. The task runs on the tokio runtime
    /// of the guard that started it, and ends when no watched lock is left; if that
    /// runtime ends first, the next watched guard starts a new task on its own runtime.
    pub fn watchdog(self) -> Self {
        self.watchdog_every(Locker::DEFAULT_WATCHDOG_FRACTION)
    }

    /// Like [`LockBuilder::watchdog`], prolonging every `fraction` of the ttl (0 < fraction < 1).
    pub fn watchdog_every(mut self, fraction: f64) -> Self {
        self.watchdog = Some(check_fraction(fraction));
        self
    }

    /// One attempt, no waiting.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a bad key, ttl or metadata (before any I/O);
    /// [`ErrorKind::ExpiredOnArrival`] when the grant came back after its ttl had run out (it
    /// was given back); otherwise the backend's error. After an error the backend may have
    /// applied all the same (its reply lost), the grant it may have made is given back in
    /// the background as the error returns (one round trip later a retry finds the key
    /// free; [`crate::settle`] waits for it): a failed obtain leaves no hold under a token
    /// nobody has.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves nothing behind. The backend call runs in a
    /// task of its own; a grant that arrives after the drop is given back by that task,
    /// after the grant, so the cleanup can never overtake it.
    pub async fn try_obtain(self) -> Result<Attempt<LockGuard>> {
        let plan = self.plan()?;
        let span = plan.span();
        async {
            let started = clock::now();
            let mut watch = plan.watch();
            let mut marker = plan.marker(false);
            let result = marker.around(plan.attempt(false)).await;
            match &result {
                Ok(Attempt::Obtained(_)) => marker.disarm(),
                _ => marker.take_away().await,
            }
            watch.attempts = 1;
            let end = ObtainEnd::of(&result, false);
            record_end(started, end);
            watch.end(end);
            result
        }
        .instrument(span)
        .await
    }

    /// Attempts until the lock is obtained, the wait runs out, the retry strategy gives up,
    /// or (with [`LockBuilder::dont_queue`]) the holder will clearly outlast the wait.
    ///
    /// Errors the backend marks retry-safe are retried like contention within the wait; the
    /// last one is returned if the wait runs out on it.
    ///
    /// # Errors
    /// As for [`LockBuilder::try_obtain`].
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future (for example from `tokio::select!` on a shutdown
    /// token) leaves nothing behind, as for [`LockBuilder::try_obtain`].
    pub async fn obtain(self) -> Result<Attempt<LockGuard>> {
        let plan = self.plan()?;
        let span = plan.span();
        plan.wait_loop().instrument(span).await
    }

    fn plan(self) -> Result<Plan<'a>> {
        let mode = self.mode_asked()?;
        let key = Key::new(self.key)?;
        let ttl = self.ttl?;
        let watchdog = self.watchdog.transpose()?;
        let holder = match self.metadata {
            Some(m) => Arc::new((*self.locker.holder).clone().with_metadata(m)?),
            None => Arc::clone(&self.locker.holder),
        };
        Ok(Plan {
            locker: self.locker,
            key,
            token: Token::generate()?,
            ttl,
            wait: self.wait,
            retry: self.retry,
            holder,
            dont_queue: self.dont_queue,
            watchdog,
            mode,
            calls: Calls::default(),
            caller: tracing::Span::current(),
        })
    }

    /// The mode with its weight, checked, on a backend that keeps it.
    fn mode_asked(&self) -> Result<Mode> {
        let backend = &self.locker.backend;
        let refuse = |msg: String| {
            Err(Error::new(
                ErrorKind::InvalidInput,
                backend.name(),
                Operation::Obtain,
                msg,
            ))
        };
        let mode = match (self.mode, self.weight) {
            (mode, None) => mode,
            (Mode::Shared { capacity, .. }, Some(weight)) if capacity != Mode::UNBOUNDED => {
                Mode::Shared { capacity, weight }
            }
            (mode, Some(_)) => {
                return refuse(format!("weight() is for semaphores, not a {mode} lock"));
            }
        };
        mode.check(backend.name())?;
        if mode.is_shared() && !backend.capabilities().shared {
            return Err(crate::backend::no_shared_holds(backend.name(), mode));
        }
        Ok(mode)
    }
}

impl fmt::Debug for LockBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockBuilder")
            .field("key", &self.key)
            .field("ttl", &self.ttl.as_ref().ok())
            .field("wait", &self.wait)
            .field("dont_queue", &self.dont_queue)
            .finish_non_exhaustive()
    }
}

/// A validated obtain.
struct Plan<'a> {
    locker: &'a Locker,
    key: Key,
    token: Token,
    ttl: Ttl,
    wait: Duration,
    retry: Retry,
    holder: Arc<HolderInfo>,
    dont_queue: bool,
    watchdog: Option<f64>,
    mode: Mode,
    /// The token's calls: a queueing attempt and the release that takes its marker away
    /// go one at a time (`crate::client::turn`), and the guard inherits them.
    calls: Calls,
    /// The span the obtain was called in, the parent of the hold's (`lock.hold`).
    caller: tracing::Span,
}

impl Plan<'_> {
    /// The obtain's start, reported; its end is reported when the watch ends or drops.
    fn watch(&self) -> ObtainWatch<'_> {
        ObtainWatch::start(
            &self.locker.telemetry,
            self.locker.backend.name(),
            &self.key,
            self.mode,
        )
    }

    fn span(&self) -> tracing::Span {
        tracing::debug_span!(
            "lock.obtain",
            backend = self.locker.backend.name(),
            key = %self.key,
            mode = %self.mode,
            waited_ms = tracing::field::Empty,
            outcome = tracing::field::Empty,
        )
    }

    /// One attempt; `queue`: leave a writer's marker when busy (an exclusive wait on a
    /// backend with shared holds).
    async fn attempt(&self, queue: bool) -> Result<Attempt<LockGuard>> {
        let backend = &self.locker.backend;
        // Two rounds at most: the second only after an earlier attempt's lost grant was given
        // back (see `Reacquired` below).
        for _ in 0..2 {
            // A queueing attempt may leave a marker: the release that takes it away when the
            // wait ends must not overtake it. Taken before the clock is read, so that the
            // validity counts from when the obtain is sent.
            let turn = match queue {
                true => Some(self.calls.turn().await),
                false => None,
            };
            let sent_at = clock::now();
            let call = Obtain {
                backend: Arc::clone(backend),
                key: self.key.clone(),
                token: self.token,
                ttl: self.ttl,
                holder: Arc::clone(&self.holder),
                mode: self.mode,
                queue,
                change: None,
                turn,
            };
            let telemetry = &self.locker.telemetry;
            let answer = call.run(GiveBack::AllHolds).await;
            let fencing = match answer.inspect_err(|e| telemetry.call_failed(&self.key, e))? {
                ObtainOutcome::Acquired { fencing, .. } => fencing,
                ObtainOutcome::Busy(busy) => return Ok(Attempt::Busy(busy)),
                ObtainOutcome::Lost => return Err(Error::lost_unasked(backend.name())),
                ObtainOutcome::Reacquired { holds } => {
                    // This plan's token is fresh, so only an earlier attempt of this very
                    // plan can hold it: one whose reply was lost after the backend applied it
                    // (a timeout, a cut connection). Give those holds back and ask again, so
                    // the guard ends with the one hold it asked for and a fencing token it
                    // knows.
                    tracing::debug!(
                        holds,
                        "an earlier attempt was granted after all: giving it back"
                    );
                    give_back_detached(backend, &self.key, &self.token, GiveBack::AllHolds)
                        .await
                        .inspect_err(|e| telemetry.call_failed(&self.key, e))?;
                    continue;
                }
            };
            if clock::now() >= sent_at + self.ttl.as_duration() {
                give_back_detached(backend, &self.key, &self.token, GiveBack::AllHolds)
                    .await
                    .inspect_err(|e| telemetry.call_failed(&self.key, e))?;
                return Err(Error::new(
                    ErrorKind::ExpiredOnArrival,
                    backend.name(),
                    Operation::Obtain,
                    format!(
                        "the lock was granted but its ttl of {} had run out by the time the answer arrived; use a longer ttl",
                        self.ttl
                    ),
                ));
            }
            let grant = Grant {
                backend: Arc::clone(backend),
                key: self.key.clone(),
                token: self.token,
                fencing,
                holder: Arc::clone(&self.holder),
                mode: self.mode,
                sent_at,
                ttl: self.ttl,
                cap: None,
                telemetry: telemetry.clone(),
                calls: self.calls.clone(),
                parent: self.caller.clone(),
            };
            return Ok(Attempt::Obtained(LockGuard::new(
                grant,
                &self.locker.registry,
                self.watchdog,
            )));
        }
        Err(Error::new(
            ErrorKind::Protocol,
            backend.name(),
            Operation::Obtain,
            "the backend answered Reacquired again for a token whose holds were all given back",
        ))
    }

    /// What this obtain's attempts may leave under its token, to take away when it ends
    /// without the lock (see [`Marker`]).
    fn marker(&self, queue: bool) -> Marker<'_> {
        Marker {
            target: Some((&self.locker.backend, &self.key, &self.token)),
            calls: &self.calls,
            queue,
            maybe_left: false,
        }
    }
}

/// Records how long the obtain (the current span, `lock.obtain`) waited and how it ended.
fn record_end(started: Instant, end: ObtainEnd) {
    let span = tracing::Span::current();
    let waited = clock::now().saturating_duration_since(started);
    span.record(
        "waited_ms",
        u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
    );
    span.record("outcome", end.as_str());
}
