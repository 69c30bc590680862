//! What a backend author needs: the trait every backend implements (the contract, nothing
//! more), the requests it receives, and the tools the workspace's own backends are built
//! with. A user of locks needs none of it but [`LockBackend`], which the crate root
//! re-exports.
//!
//! - [`LockBackend`], its requests ([`ObtainRequest`], [`ProlongRequest`],
//!   [`ReleaseRequest`]) and [`Capabilities`];
//! - [`Token`], the owner token a backend stores (as [`Token::digest`] on a server);
//! - [`storage`]: a backend from a storage that reads and writes one record per key
//!   atomically: implement [`storage::Storage`] and the whole contract comes with it;
//! - [`codec`]: how a storage keeps the owner token and the holder info;
//! - [`routine`]: a backend whose server decides (a script, a function, a procedure) and
//!   defers to a storage what it does not: implement [`routine::Routine`] beside
//!   [`storage::Storage`], and [`routine::Routed`] is the backend;
//! - [`layer`]: a backend that wraps another and changes one call ([`layer::Layer`],
//!   everything else forwarded);
//! - [`rules`]: the contract's decisions as pure functions ([`rules::step`], one entry for
//!   every operation), to decide with instead of writing them again; [`Grace`], how long an
//!   expired record is remembered;
//! - [`Waiters`] and [`ReleaseSubscription`], to wake waiters on release;
//! - [`UrlOptions`], [`schemes`], [`check_call_timeout`]: reading a backend's URL;
//! - [`prolongate_each`] and [`prolongate_each_with`], the default batch prolong;
//! - [`connect_or_say_why`] and [`why_unreachable`]: an unreachable server said as such
//!   (refused, no route) rather than as a deadline that passed;
//! - [`async_trait`](macro@async_trait), to implement the trait.
//!
//! The workspace's backends are built from these: the memory backend (this crate),
//! `lock-file` and `lock-etcd` are storages; `lock-redis` is a storage (its WATCH variant)
//! and a script of its own (its Lua variant); `lock-postgres` and `lock-mysql` are routines
//! over storages.

use std::fmt;
use std::time::Duration;

use tokio::sync::watch;

mod capabilities;
pub mod codec;
pub mod layer;
pub mod listing;
pub mod routine;
pub mod rules;
pub mod schemes;
pub mod storage;

use crate::{
    Fencing, HolderInfo, Key, LockState, Mode, ObtainOutcome, ProlongOutcome, ReleaseOutcome,
    Result, Ttl,
};

/// Arguments of [`LockBackend::obtain`].
///
/// Made with [`ObtainRequest::new`] (an exclusive request) and the `with_` methods, so that
/// requests can grow without breaking a backend's code.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ObtainRequest<'a> {
    /// The key to lock.
    pub key: &'a Key,
    /// The owner.
    pub token: &'a Token,
    /// How long the lock stays valid without prolonging.
    pub ttl: Ttl,
    /// Stored with the lock for anyone to see.
    pub holder: &'a HolderInfo,
    /// Exclusive (the default), or shared with a capacity and a weight. A backend that does
    /// not declare [`Capabilities::shared`] receives only exclusive requests from the
    /// client layer, and answers a shared one with [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput).
    pub mode: Mode,
    /// The caller waits and will ask again: an exclusive request that is busy leaves a
    /// writer's marker that keeps new shared holds out (see
    /// [`rules::Obtain::queue`]). Only for backends with [`Capabilities::shared`].
    pub queue: bool,
    /// A mode change: the fencing token of the caller's own live hold in the other mode,
    /// the one this request turns into `mode` (a read hold into the write lock, or back).
    /// The backend changes that hold or nothing: when the token has no live hold in the
    /// other mode with this fencing token (it expired, an operator force-released it, the
    /// backend lost its data), the answer is [`ObtainOutcome::Lost`] and nothing is written,
    /// rather than a fresh grant that would hide a writer who held the key in between (see
    /// [`rules::Obtain::change`]). `None` for every other obtain.
    pub change: Option<Fencing>,
}

impl<'a> ObtainRequest<'a> {
    /// An exclusive request, not queueing.
    pub fn new(key: &'a Key, token: &'a Token, ttl: Ttl, holder: &'a HolderInfo) -> Self {
        ObtainRequest {
            key,
            token,
            ttl,
            holder,
            mode: Mode::Exclusive,
            queue: false,
            change: None,
        }
    }

    /// The same request in `mode`.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The same request, queueing or not.
    pub fn with_queue(mut self, queue: bool) -> Self {
        self.queue = queue;
        self
    }

    /// The same request as a mode change of the caller's hold with fencing token `of`
    /// (see [`ObtainRequest::change`]).
    pub fn with_change(mut self, of: Fencing) -> Self {
        self.change = Some(of);
        self
    }

    /// Refuses a shared request, for a backend that keeps no shared holds.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming `backend` when
    /// the request is shared.
    pub fn exclusive_only(&self, backend: &'static str) -> Result<()> {
        match self.mode.is_shared() {
            true => Err(no_shared_holds(backend, self.mode)),
            false => Ok(()),
        }
    }
}

/// The refusal of `mode` by `backend`, which keeps exclusive locks only: the client layer's
/// (before any I/O) and [`ObtainRequest::exclusive_only`]'s.
pub(crate) fn no_shared_holds(backend: &'static str, mode: Mode) -> crate::Error {
    crate::Error::new(
        crate::ErrorKind::InvalidInput,
        backend,
        crate::Operation::Obtain,
        format!("the {backend} backend keeps exclusive locks only, not semaphores or read locks ({mode})"),
    )
}

/// Arguments of [`LockBackend::prolongate`].
#[derive(Debug, Clone, Copy)]
pub struct ProlongRequest<'a> {
    /// The locked key.
    pub key: &'a Key,
    /// The owner.
    pub token: &'a Token,
    /// The new ttl, counted from now.
    pub ttl: Ttl,
}

/// Arguments of [`LockBackend::release`].
#[derive(Debug, Clone, Copy)]
pub struct ReleaseRequest<'a> {
    /// The locked key.
    pub key: &'a Key,
    /// The owner.
    pub token: &'a Token,
    /// A cooldown after the release that frees the lock: every obtain is busy until it ends.
    pub delay_after: Option<Ttl>,
}

/// How many calls the default [`LockBackend::prolongate_many`] keeps in flight at once.
pub const PROLONG_MANY_CONCURRENCY: usize = 32;

/// Prolongs each request with its own [`LockBackend::prolongate`] call, at most
/// [`PROLONG_MANY_CONCURRENCY`] in flight: the default [`LockBackend::prolongate_many`],
/// for a backend that overrides it only where it has something better (the Redis backend
/// on a cluster, whose keys no single pipeline reaches).
///
/// It yields to the runtime after each group of calls, so a backend whose calls finish
/// without ever awaiting (the file backend, a backend doing blocking I/O) never holds its
/// thread for a whole batch: the watchdog fires the lost signal of a lock whose validity
/// runs out during the batch between two groups, not after the last.
pub async fn prolongate_each<B: LockBackend + ?Sized>(
    backend: &B,
    reqs: &[ProlongRequest<'_>],
) -> Vec<Result<ProlongOutcome>> {
    prolongate_each_with(reqs, |req| backend.prolongate(req)).await
}

/// [`prolongate_each`] with `prolong` for one request: what a [`layer::Layer`] does by
/// default, and what a layer that overrides [`layer::Layer::prolongate_many`] (to count the
/// batches, say) calls with its own `prolongate`.
pub async fn prolongate_each_with<'r, F, Fut>(
    reqs: &[ProlongRequest<'r>],
    prolong: F,
) -> Vec<Result<ProlongOutcome>>
where
    F: Fn(ProlongRequest<'r>) -> Fut,
    Fut: std::future::Future<Output = Result<ProlongOutcome>>,
{
    let mut answers = Vec::with_capacity(reqs.len());
    for chunk in reqs.chunks(PROLONG_MANY_CONCURRENCY) {
        let calls: Vec<_> = chunk.iter().map(|req| prolong(*req)).collect();
        answers.extend(futures_util::future::join_all(calls).await);
        tokio::task::yield_now().await;
    }
    answers
}

/// A place that can hold named, expiring, owner-checked locks.
///
/// Hold it as `Arc<dyn LockBackend>` and use it through [`Locker`](crate::Locker), which adds
/// waiting, retries, guards and the watchdog the same way for every backend.
///
/// # Contract
/// Every rule of [`contract`](crate::contract); the `lock-conformance` crate is its executable
/// form and every backend in this workspace passes it. In short:
/// - contention is an outcome ([`ObtainOutcome::Busy`], [`ProlongOutcome::Lost`]), never an
///   [`Error`](crate::Error);
/// - at no instant do two tokens hold a key within their ttl, as judged by the backend's
///   clock;
/// - fencing tokens only grow, per key, across expiry, deletion and data loss;
/// - an expired record is kept for a grace period (by default at least its ttl) so that a late
///   prolong or release answers `ProlongedLate`/`ReleasedLate` rather than `Lost`;
/// - after an error the lock is in one of the contract's states and retrying is safe.
///
/// # Cancel safety
/// Dropping a call's future may or may not have applied it; the state is still one the
/// contract allows, and the call can be retried. [`Locker`](crate::Locker) cleans up an
/// obtain whose future was dropped.
#[async_trait]
pub trait LockBackend: fmt::Debug + Send + Sync + 'static {
    /// Short stable name used in errors, spans and the conformance report, e.g. `"redis-lua"`.
    fn name(&self) -> &'static str;

    /// What the backend can do beyond the contract.
    fn capabilities(&self) -> Capabilities;

    /// Tries once to take `req.key` for `req.token`.
    ///
    /// # Contract
    /// [`ObtainOutcome::Acquired`] when free, expired or out of cooldown (a new fencing
    /// token, one hold); [`ObtainOutcome::Reacquired`] when `req.token` holds it and it has not
    /// expired (holds + 1, ttl reset, same fencing); [`ObtainOutcome::Busy`] otherwise.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable) when the backend cannot be
    /// reached, [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when the record cannot be
    /// read.
    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome>;

    /// Extends a held lock to `req.ttl` from now.
    ///
    /// # Contract
    /// [`ProlongOutcome::Prolonged`] when held and not expired;
    /// [`ProlongOutcome::ProlongedLate`] when expired but nobody took it since (fencing and
    /// holds kept); [`ProlongOutcome::Lost`] when someone took it or the record is gone.
    /// Never changes the hold count.
    ///
    /// # Errors
    /// As for [`LockBackend::obtain`].
    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome>;

    /// Prolongs many locks in one go: the [`Locker`](crate::Locker)'s watchdog renews every
    /// lock due at the same moment with one call, so that 10,000 watched locks cost a few
    /// round trips per renewal period rather than 10,000.
    ///
    /// # Contract
    /// One answer per request, in the order of `reqs`, each what
    /// [`LockBackend::prolongate`] would have answered had the requests been made one
    /// after the other in that order. A failure may answer every request it covers with
    /// the same error (a connection lost mid-batch); an empty `reqs` answers nothing and
    /// sends nothing.
    ///
    /// The default calls [`LockBackend::prolongate`] for each request, at most
    /// [`PROLONG_MANY_CONCURRENCY`] at a time: correct for every backend, and what a
    /// wrapper that intercepts `prolongate` (a fault injector, a metrics layer) should
    /// keep. A backend with a cheaper way (a pipeline, one statement over many rows)
    /// overrides it; the conformance suite checks both the same way. An override must not
    /// hold its thread for the whole batch without awaiting: the watchdog fires the lost
    /// signal of a lock whose validity runs out mid-batch only when the call yields (the
    /// default yields after each group of calls).
    ///
    /// # Errors
    /// Per request, as for [`LockBackend::prolongate`].
    ///
    /// # Cancel safety
    /// Dropping the future may have prolonged any subset of the locks; each is still in a
    /// state the contract allows, and calling again is safe.
    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        prolongate_each(self, reqs).await
    }

    /// Gives back one hold.
    ///
    /// # Contract
    /// [`ReleaseOutcome::Decremented`] when reentrant holds remain (the cooldown is
    /// ignored); [`ReleaseOutcome::Released`] when this frees it (then cooling down for
    /// `delay_after`); [`ReleaseOutcome::ReleasedLate`] when it had expired but nobody took
    /// it since (freed whatever the hold count); [`ReleaseOutcome::Lost`] otherwise, changing
    /// nothing.
    ///
    /// # Errors
    /// As for [`LockBackend::obtain`].
    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome>;

    /// The current state of `key`; changes nothing.
    ///
    /// # Errors
    /// As for [`LockBackend::obtain`].
    async fn inspect(&self, key: &Key) -> Result<LockState>;

    /// Breaks the lock on `key` out of band, for an operator: the holder and any cooldown are
    /// removed, the fencing sequence is kept (the next holder gets a higher token), and the
    /// former holder's prolong or release answers `Lost`. Returns the state it broke.
    ///
    /// # Errors
    /// As for [`LockBackend::obtain`].
    async fn force_release(&self, key: &Key) -> Result<LockState>;

    /// Subscribes to releases of `key`, for waiters that would rather be woken than poll.
    ///
    /// Call it *before* the obtain attempt that precedes the wait, so that a release
    /// published in between still wakes the waiter ([`Locker`](crate::Locker) subscribes
    /// after a first `Busy`, then attempts once more before it waits). `Ok(None)`, the
    /// default, means the backend has no notification and waiters poll per their retry
    /// strategy.
    ///
    /// Whom a release wakes follows the decision ([`rules::Wake`]: one waiter, all of
    /// them, or nobody), in every process. A subscription made by [`Waiters`] can be made a
    /// watcher's ([`ReleaseSubscription::watch_only`]: an observer of who leads is woken by
    /// every release and never takes a waiter's turn); a backend that keeps a line of its
    /// own instead must wake all of a key's subscribers, or an observer that subscribed
    /// first is woken in a waiting candidate's place. The conformance suite checks each
    /// rule (`a_release_wakes_a_waiter_at_once`, `a_release_wakes_one_waiter_not_two`,
    /// `the_last_share_beside_a_writer_wakes_every_waiter`,
    /// `a_downgrade_wakes_every_waiter`, `what_frees_nothing_wakes_nobody`,
    /// `a_resignation_wakes_the_candidate_not_the_observer`).
    ///
    /// # Errors
    /// As for [`LockBackend::obtain`]; a waiter treats an error as "no notification".
    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        let _ = key;
        Ok(None)
    }

    /// One page of the keys the backend keeps a record for, under `req.prefix`: key names
    /// only, in the order [`Capabilities::listing`] says. The listing module's `list` pages
    /// through them and inspects each, which is what a caller wants; this is the part a
    /// backend writes.
    ///
    /// # Contract
    /// In memory bounded by `req.limit` whatever the number of keys; changes nothing. Every
    /// key with a live hold or cooldown throughout a walk shows in it (exactly once, or at
    /// least once for [`Listing::Scan`]); a key may show with nothing live left (a record
    /// kept for late detection), which the listing drops after inspecting it. The default
    /// answers [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported), as a backend
    /// whose capabilities say [`Listing::Unsupported`] must.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a limit out of
    /// [`KeysRequest::validate`]'s range or a cursor this backend did not make; otherwise as
    /// for [`LockBackend::obtain`].
    ///
    /// # Cancel safety
    /// It only reads: dropping the future leaves everything as it was.
    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        let _ = req;
        Err(listing::unsupported(self.name()))
    }
}

/// A live subscription to the releases of one key; see [`LockBackend::subscribe`].
///
/// Backends build it from a [`watch`] channel whose value they bump on every release of the
/// key; the subscription stays registered until it is dropped.
pub struct ReleaseSubscription {
    rx: watch::Receiver<u64>,
    /// Its place in a [`Waiters`] line, when [`Waiters::subscribe`] made it.
    line: Option<crate::waiters::Registration>,
    _registration: Option<Box<dyn Send + Sync>>,
}

impl ReleaseSubscription {
    /// Wraps a receiver; `registration` is dropped with the subscription (for example to
    /// unsubscribe from a shared channel).
    pub fn new(rx: watch::Receiver<u64>, registration: Option<Box<dyn Send + Sync>>) -> Self {
        ReleaseSubscription {
            rx,
            line: None,
            _registration: registration,
        }
    }

    /// A subscription standing in a [`Waiters`] line.
    pub(crate) fn in_line(rx: watch::Receiver<u64>, line: crate::waiters::Registration) -> Self {
        ReleaseSubscription {
            rx,
            line: Some(line),
            _registration: None,
        }
    }

    /// The same subscription, also keeping `registration` until it is dropped (after the
    /// one it had): for a backend that keeps more than one thing per waiter.
    pub fn holding(self, registration: Box<dyn Send + Sync>) -> Self {
        let both: Box<dyn Send + Sync> = Box::new((self._registration, registration));
        ReleaseSubscription {
            rx: self.rx,
            line: self.line,
            _registration: Some(both),
        }
    }

    /// Makes this subscription a watcher's, not a waiter's: it is woken by every release of
    /// its key and never takes the turn of a waiter for the lock (an observer of who leads
    /// must not be woken in the place of the candidate that waits). Works on the
    /// subscriptions [`Waiters`] makes, whatever the backend wraps around them; on others
    /// it changes nothing.
    pub fn watch_only(&mut self) {
        if let Some(line) = &self.line {
            line.watch_only();
        }
    }

    /// Waits for the next release after the last one seen, for at most `max`; returns
    /// whether a release was seen. A closed channel counts as "not seen" (the caller's
    /// fallback poll covers it).
    ///
    /// # Cancel safety
    /// Cancel safe: a release that arrives while no one waits is seen by the next call.
    pub async fn released_within(&mut self, max: Duration) -> bool {
        match tokio::time::timeout(max, self.rx.changed()).await {
            Ok(Ok(())) => true,
            Ok(Err(_)) => {
                tokio::time::sleep(max).await;
                false
            }
            Err(_) => false,
        }
    }
}

impl fmt::Debug for ReleaseSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseSubscription")
            .finish_non_exhaustive()
    }
}

pub use crate::duration::{check_call_timeout, MAX_CALL_TIMEOUT};
pub use crate::reach::{connect_or_say_why, why_unreachable, PROBE_AFTER};
pub use crate::token::Token;
pub use crate::ttl::Grace;
pub use crate::url::UrlOptions;
pub use crate::waiters::Waiters;
pub use async_trait::async_trait;
pub use capabilities::{Capabilities, Expiry};
pub use listing::{Cursor, KeyPage, KeysRequest, Listing};
