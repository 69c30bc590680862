//! Backend calls that finish even when their caller stops waiting.
//!
//! Dropping a backend call's future does not take back what was already sent: a Postgres
//! statement keeps running and commits, a Redis command is applied. A cleanup sent *after*
//! the drop can overtake the call it cleans up (another pooled connection, another queue),
//! answer `Lost`, and leave the late grant held by nobody until its ttl ends. So every call
//! of the client layer that can grant or free a lock is a [`RunToEnd`]: the caller polls it
//! in place while it waits (no task hop, which on a busy 2-core machine cost tens of
//! microseconds per call), and if the caller is dropped first, the rest of the call moves to
//! a task of its own, where a grant that finds the caller gone is given back after the
//! grant and on the same path, never racing it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::sync::Notify;

use tracing::Instrument;

use crate::client::turn::Turn;
use crate::{
    Error, ErrorKind, Fencing, HolderInfo, Key, LockBackend, Mode, ObtainOutcome, ObtainRequest,
    Operation, ReleaseOutcome, ReleaseRequest, Result, Token, Ttl,
};

/// What a grant nobody waits for any more is undone with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveBack {
    /// The token is fresh (a new obtain): every hold it has is the orphan's.
    AllHolds,
    /// The token already held the lock (a reentrant obtain): only the hold it was granted.
    OneHold,
    /// Nothing: the grant is the guard's own hold in another mode (a mode change), which
    /// the guard still gives back itself.
    Keep,
}

/// One obtain, owned, so that it can outlive its caller.
pub(crate) struct Obtain {
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) key: Key,
    pub(crate) token: Token,
    pub(crate) ttl: Ttl,
    pub(crate) holder: Arc<HolderInfo>,
    pub(crate) mode: Mode,
    /// Leave a writer's marker when busy (see [`ObtainRequest::queue`]).
    pub(crate) queue: bool,
    /// A mode change of the hold with this fencing token (see [`ObtainRequest::change`]).
    pub(crate) change: Option<Fencing>,
    /// The token's turn, when the obtain changes what an existing hold is (a reentrant
    /// obtain, a mode change): kept until the call and its give-back ended.
    pub(crate) turn: Option<Turn>,
}

impl Obtain {
    /// Sends the obtain and waits for its answer.
    ///
    /// # Cancel safety
    /// Cancel safe: if this future is dropped, the obtain still completes in its task and a
    /// grant nobody read is given back per `orphan`, after the grant.
    pub(crate) async fn run(self, orphan: GiveBack) -> Result<ObtainOutcome> {
        self.run_keeping(orphan, ()).await.0
    }

    /// As [`Obtain::run`], with `keep` owned by the call until the backend answers: handed
    /// back with the answer, or, if the caller is gone by then, dropped where the call
    /// finishes (after the grant is handed to its give-back), never before. The token's
    /// turn, if the obtain has one, comes back with the answer; if the caller is gone, it
    /// is kept until the give-back of the grant ended.
    pub(crate) async fn run_keeping<K: Send + 'static>(
        mut self,
        orphan: GiveBack,
        keep: K,
    ) -> (Result<ObtainOutcome>, K, Option<Turn>) {
        let turn = self.turn.take();
        let call = async move {
            let mut req = ObtainRequest::new(&self.key, &self.token, self.ttl, &self.holder)
                .with_mode(self.mode)
                .with_queue(self.queue);
            req.change = self.change;
            let outcome = self.backend.obtain(req).await;
            // If the caller is gone, the unread grant is dropped where the call finishes: it gives
            // back its grant, after the grant, on the same path.
            let grant = UnreadGrant {
                outcome: Some(outcome),
                orphan: Some(Orphan {
                    backend: self.backend,
                    key: self.key,
                    token: self.token,
                    what: orphan,
                    turn,
                }),
            };
            (grant, keep)
        };
        let (grant, keep) = RunToEnd::new(call.in_current_span()).await;
        let (outcome, turn) = grant.take();
        (outcome, keep, turn)
    }
}

/// An obtain's outcome on its way to the caller. The caller may be cancelled at any point:
/// before the answer, or after it was handed over but before it was read. A grant that
/// nobody takes out is given back when this is dropped.
struct UnreadGrant {
    outcome: Option<Result<ObtainOutcome>>,
    orphan: Option<Orphan>,
}

/// How to give back a grant its caller left behind.
struct Orphan {
    backend: Arc<dyn LockBackend>,
    key: Key,
    token: Token,
    what: GiveBack,
    /// The token's turn: no other call of the token is sent before the give-back ended.
    turn: Option<Turn>,
}

impl UnreadGrant {
    /// The outcome, now the caller's to act on, and the token's turn, if the call had it.
    fn take(mut self) -> (Result<ObtainOutcome>, Option<Turn>) {
        let turn = self.orphan.take().and_then(|orphan| orphan.turn);
        let outcome = self.outcome.take().unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::Protocol,
                "lock-core",
                Operation::Obtain,
                "an obtain's outcome was taken twice",
            ))
        });
        (outcome, turn)
    }
}

impl Drop for UnreadGrant {
    fn drop(&mut self) {
        let granted = matches!(
            self.outcome,
            Some(Ok(
                ObtainOutcome::Acquired { .. } | ObtainOutcome::Reacquired { .. }
            ))
        );
        let (Some(orphan), true) = (self.orphan.take(), granted) else {
            return;
        };
        if orphan.what == GiveBack::Keep {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %orphan.key, "a cancelled obtain's grant cannot be given back outside a runtime; it expires after its ttl");
            return;
        };
        in_background(
            &runtime,
            async move {
                tracing::debug!(key = %orphan.key, "the caller is gone: giving back its grant");
                if let Err(e) = give_back(&*orphan.backend, &orphan.key, &orphan.token, orphan.what).await
                {
                    tracing::warn!(key = %orphan.key, "could not give back the grant of a cancelled obtain; it expires after its ttl: {e}");
                }
                // The token's next call goes out only now.
                drop(orphan.turn);
            }
            .in_current_span(),
        );
    }
}

/// Gives back what `token` holds on `key`: one hold, or all of them. Runs in its own task,
/// so that dropping the caller does not stop it half way.
///
/// # Errors
/// The backend's error; nothing more is given back after it.
pub(crate) async fn give_back_detached(
    backend: &Arc<dyn LockBackend>,
    key: &Key,
    token: &Token,
    what: GiveBack,
) -> Result<()> {
    let (backend, key, token) = (Arc::clone(backend), key.clone(), *token);
    let call = async move { give_back(&*backend, &key, &token, what).await };
    detached(call.in_current_span()).await
}

/// Runs `call` to its end even if the caller stops waiting: see [`RunToEnd`].
///
/// # Errors
/// `call`'s error.
pub(crate) async fn detached<T: Send + 'static>(
    call: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    RunToEnd::new(call).await
}

/// A call its caller polls in place (no task, no hop to another thread while the caller
/// waits), which finishes even if the caller stops waiting: dropped before its end, it
/// hands the rest of the call to a task of its own, where its result is dropped when it
/// arrives (a [`UnreadGrant`] gives its grant back then).
struct RunToEnd<T: Send + 'static> {
    call: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
}

impl<T: Send + 'static> RunToEnd<T> {
    fn new(call: impl Future<Output = T> + Send + 'static) -> Self {
        RunToEnd {
            call: Some(Box::pin(call)),
        }
    }
}

impl<T: Send + 'static> Future for RunToEnd<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        let Some(call) = this.call.as_mut() else {
            // Polled after it finished: a caller's bug, and it never resolves again.
            return Poll::Pending;
        };
        let done = ready!(call.as_mut().poll(cx));
        this.call = None;
        Poll::Ready(done)
    }
}

impl<T: Send + 'static> Drop for RunToEnd<T> {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => in_background(&runtime, async move {
                drop(call.await);
            }),
            Err(_) => tracing::warn!(
                "a lock call cut off outside a runtime cannot finish; a lock it granted \
                 expires after its ttl"
            ),
        }
    }
}

async fn give_back(
    backend: &dyn LockBackend,
    key: &Key,
    token: &Token,
    what: GiveBack,
) -> Result<()> {
    release_holds(backend, key, token, None, what)
        .await
        .map(drop)
}

/// Releases what `token` holds on `key`: one hold, or every hold it has (releasing again
/// while the backend answers `Decremented`); the last answer. `delay_after` goes with each
/// release: the contract applies it only to the one that frees the lock.
///
/// # Errors
/// The backend's error; nothing more is released after it.
pub(crate) async fn release_holds(
    backend: &dyn LockBackend,
    key: &Key,
    token: &Token,
    delay_after: Option<Ttl>,
    what: GiveBack,
) -> Result<ReleaseOutcome> {
    // A hold count is a u32, but a backend that keeps answering `Decremented` must not keep
    // this call going for ever: past this many rounds the rest expires with the ttl.
    const MAX_ROUNDS: u32 = 1024;
    let req = ReleaseRequest {
        key,
        token,
        delay_after,
    };
    let mut outcome = backend.release(req).await?;
    for _ in 1..MAX_ROUNDS {
        if what == GiveBack::OneHold || !matches!(outcome, ReleaseOutcome::Decremented { .. }) {
            return Ok(outcome);
        }
        tracing::debug!(%key, "the backend counts holds nobody has: giving them back");
        outcome = backend.release(req).await?;
    }
    tracing::warn!(%key, "gave up giving back holds after {MAX_ROUNDS} releases; the rest expire with the ttl");
    Ok(outcome)
}

/// Calls of every locker of this process left to finish in tasks of their own.
static BACKGROUND: Background = Background {
    running: AtomicUsize::new(0),
    idle: Notify::const_new(),
};

struct Background {
    running: AtomicUsize,
    idle: Notify,
}

/// Counts one call running in the background until dropped.
pub(crate) struct Running;

/// Starts counting one call in the background (see [`settle`]) until the value drops: for
/// a task that was started otherwise and has clean-up left to do.
pub(crate) fn counted() -> Running {
    BACKGROUND.running.fetch_add(1, Ordering::AcqRel);
    Running
}

impl Drop for Running {
    fn drop(&mut self) {
        if BACKGROUND.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            BACKGROUND.idle.notify_waiters();
        }
    }
}

/// Runs `call` in a task of its own on `runtime`, counted until it ends (or its runtime
/// drops it), so that [`settle`] can wait for it.
pub(crate) fn in_background(
    runtime: &tokio::runtime::Handle,
    call: impl Future<Output = ()> + Send + 'static,
) {
    BACKGROUND.running.fetch_add(1, Ordering::AcqRel);
    let running = Running;
    runtime.spawn(async move {
        let _running = running;
        call.await;
    });
}

/// Waits until the calls that every [`Locker`](crate::Locker) of this process left to
/// finish in the background have ended, for at most `within`; whether they all did.
///
/// Those calls are the clean-up of what a caller stopped waiting for: the release of a
/// guard dropped while held, the give-back of a grant that arrived after its obtain was
/// cancelled, the release that takes a waiting writer's marker away when its wait was
/// dropped, a call cut off in flight. They run as tasks on the runtime, and a runtime
/// that ends drops them: a process that returns from `main` (or from `block_on`) right
/// after cancelling a lock call can leave a lock or a marker behind until its ttl ends.
/// Call this before the runtime ends, for example after a shutdown signal:
///
/// ```
/// # use std::{sync::Arc, time::Duration};
/// # use lock_core::{Locker, MemoryBackend};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// # let locker = Locker::new(Arc::new(MemoryBackend::new()));
/// let guard = locker.lock("job").obtain().await?.obtained().unwrap();
/// drop(guard); // released in the background, with a warning
/// assert!(lock_core::settle(Duration::from_secs(5)).await);
/// # Ok(()) }
/// ```
///
/// Every backend call has a deadline, so the calls end; `within` bounds the wait anyway.
///
/// # Cancel safety
/// Cancel safe: it only waits.
pub async fn settle(within: std::time::Duration) -> bool {
    let waited = tokio::time::timeout(within, async {
        loop {
            let idle = BACKGROUND.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if BACKGROUND.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    });
    waited.await.is_ok()
}
