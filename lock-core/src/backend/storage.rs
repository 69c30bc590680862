//! A backend from a storage: implement [`Storage`] (read one key's record and a clock
//! under whatever makes a decision atomic, then store what was decided) and the whole
//! [`LockBackend`] contract comes with it, decided by [`rules::step`](super::rules::step).
//!
//! The storage never decides anything: it hands the record it read to the step it is
//! given, and writes back the record the step returns. Fencing, reentrancy, late vs lost,
//! cooldowns, shared holds, mode changes and the writer's marker are the rules' business,
//! written once. What stays the storage's:
//!
//! - **atomicity**: between reading the record and storing the decision nobody else
//!   decides on the same key: a mutex, a `flock`, a row lock (`SELECT … FOR UPDATE`), or an
//!   optimistic write that fails when the record changed since the read (`WATCH`/`EXEC`, a
//!   compare-and-swap on a version): then [`Commit::Conflict`], and the step runs again on a
//!   fresh read, after a jittered pause, until [`Storage::conflicts_within`] has passed;
//! - **the clock**: one clock for every decision on a key (the server's, when there is a
//!   server), read after every wait of the call, and a fencing floor that keeps fencing
//!   tokens growing should the record be lost;
//! - **the encoding** of tokens and holder info: a [`Codec`](super::codec) it names;
//! - **deadlines**: each of its calls that crosses a network ends in bounded time;
//! - **wake-ups**: [`Change::wake`] says whom a write frees room for.
//!
//! Every type that implements [`Storage`] is a [`LockBackend`]: hold it as
//! `Arc<dyn LockBackend>`. The memory, file and etcd backends and Redis's WATCH variant
//! are storages; Postgres and MariaDB are storages under a server routine
//! (the routine kit, `lock_core::backend::routine`), which runs [`obtain`], [`prolongate`], [`release`],
//! [`inspect`] and [`force_release`] when the routine defers.
//!
//! # A complete backend
//! A map behind a mutex, with release notifications: the whole contract (mutexes,
//! semaphores, read-write locks) in the lines below, and what
//! `lock_conformance::run_all` checks.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::{Arc, Mutex};
//! use std::time::Instant;
//!
//! use lock_core::backend::rules::{Clock, Record, Wake};
//! use lock_core::backend::codec::AsIs;
//! use lock_core::backend::storage::{Change, Commit, Decide, Snapshot, Storage};
//! use lock_core::backend::{Capabilities, ReleaseSubscription, Token, Waiters};
//! use lock_core::{HolderInfo, Key, LockBackend, Locker, Operation, Result};
//!
//! #[derive(Debug)]
//! struct MapStorage {
//!     records: Mutex<HashMap<String, Record<Token, HolderInfo>>>,
//!     waiters: Waiters,
//!     started: Instant,
//! }
//!
//! impl Storage for MapStorage {
//!     type Codec = AsIs;
//!     const NAME: &'static str = "map";
//!
//!     fn storage_capabilities(&self) -> Capabilities {
//!         Capabilities::none().shared(true).release_notification(true)
//!     }
//!
//!     async fn transact(
//!         &self,
//!         key: &Key,
//!         _: Operation,
//!         decide: &mut Decide<'_, Token, HolderInfo>,
//!     ) -> Result<Commit> {
//!         let mut records = self.records.lock().unwrap();
//!         let now = u64::try_from(self.started.elapsed().as_nanos()).unwrap();
//!         // The clock is monotonic and never reset, so it is the fencing floor too.
//!         let snapshot = Snapshot {
//!             record: records.get(key.as_str()),
//!             clock: Clock::nanos(now),
//!             fencing_floor: now / 1000,
//!         };
//!         let Change { write, wake } = decide(snapshot)?;
//!         if let Some(record) = write {
//!             records.insert(key.as_str().to_owned(), record);
//!         }
//!         self.waiters.wake(key.as_str(), wake);
//!         Ok(Commit::Done)
//!     }
//!
//!     async fn subscribe_releases(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
//!         Ok(Some(self.waiters.subscribe(key.as_str())))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! let backend: Arc<dyn LockBackend> = Arc::new(MapStorage {
//!     records: Mutex::default(),
//!     waiters: Waiters::default(),
//!     started: Instant::now(),
//! });
//! let locker = Locker::new(backend);
//! let guard = locker.lock("job").try_obtain().await?.obtained().expect("free");
//! assert!(locker.lock("job").try_obtain().await?.is_busy());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! A storage that keeps free records forever grows with every key ever locked; the memory
//! backend drops what [`rules::forgotten`](super::rules::forgotten) says it may (and keeps fencing growing with a
//! counter that outlives records).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use super::codec::Codec;
use super::rules::{Answer, Ask, Clock, Obtain, Record, Wake};
use super::{
    async_trait, Capabilities, KeyPage, KeysRequest, LockBackend, ObtainRequest, ProlongRequest,
    ReleaseRequest, ReleaseSubscription,
};
mod many;
mod run;
pub use many::{prolongate_many, DecideMany};
#[cfg(test)]
use run::conflict_pause;
use run::run;

use crate::{
    Error, ErrorKind, Grace, Key, LockState, ObtainOutcome, Operation, ProlongOutcome,
    ReleaseOutcome, Result, Ttl,
};

/// What a storage read for one decision, under whatever makes the decision atomic.
#[derive(Debug)]
pub struct Snapshot<'r, T, H> {
    /// The key's record, `None` when there is none.
    pub record: Option<&'r Record<T, H>>,
    /// The instant of the decision, read after every wait of the call (the lock that makes
    /// it atomic, the read), on the one clock every decision on the key uses.
    pub clock: Clock,
    /// The lowest fencing token a fresh acquisition may issue: a clock in microseconds that
    /// never goes back, or one above a counter that outlives records. It keeps fencing
    /// growing should the record be lost.
    pub fencing_floor: u64,
}

/// What the step decided: the record to store and whom to wake.
#[derive(Debug)]
pub struct Change<T, H> {
    /// The record to store for the key; `None`: leave it as it is (write nothing).
    pub write: Option<Record<T, H>>,
    /// Whom the write frees room for among the key's waiters, once it is stored.
    pub wake: Wake,
}

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// The change is stored (or there was nothing to store).
    Done,
    /// Nothing was stored because the record changed since it was read (an optimistic
    /// write that lost): the step runs again on a fresh read.
    Conflict,
}

/// The owner token as `S` stores it.
pub type TokenOf<S> = <<S as Storage>::Codec as Codec>::Token;
/// The holder info as `S` stores it.
pub type HolderOf<S> = <<S as Storage>::Codec as Codec>::Holder;

/// The step a storage runs on what it read: it returns what to store, or an error (a holder
/// that cannot be decoded) on which the storage stores nothing and returns the error.
pub type Decide<'s, T, H> =
    dyn for<'r> FnMut(Snapshot<'r, T, H>) -> Result<Change<T, H>> + Send + 's;

/// A place that keeps one record per key, atomically read and written: all a backend on
/// this adapter implements (see the [module](self) docs for a complete one). Its async
/// methods are written `async fn` in an implementation (no `#[async_trait]`: the adapter
/// calls them without boxing a future per call, and requires their futures to be `Send`).
/// A `'static`
/// storage is a [`LockBackend`]; one that borrows (a view with the caller's key prefix)
/// runs the contract through [`obtain`], [`prolongate`], [`release`], [`inspect`] and
/// [`force_release`].
pub trait Storage: fmt::Debug + Send + Sync {
    /// How the owner token and the holder info are stored ([`codec`](super::codec)): as
    /// they are ([`AsIs`](super::codec::AsIs)), the token's digest and the holder's JSON
    /// ([`DigestJson`](super::codec::DigestJson)), …
    type Codec: Codec;
    /// The backend's name, as [`LockBackend::name`].
    const NAME: &'static str;

    /// What the backend can do beyond the contract, as [`LockBackend::capabilities`].
    /// [`Capabilities::prolong_batch`] above 1 says that [`Storage::transact_many`] stores
    /// that many prolongs in one transaction, and the adapter's
    /// [`prolongate_many`](fn@prolongate_many) sends them so; at 1 (the default) it
    /// prolongs each lock in a transaction of its own, several at once.
    fn storage_capabilities(&self) -> Capabilities;

    /// How long an expired hold of `ttl` is remembered, to tell a late call from a lost
    /// one: the ttl itself by default.
    fn grace(&self, ttl: Ttl) -> Grace {
        Grace::or_ttl(None, ttl)
    }

    /// How long a call keeps running the step again after conflicts before it fails
    /// ([`ErrorKind::Unavailable`], nothing written, safe to retry): 5 s by default, and
    /// never past [`Storage::call_timeout`].
    fn conflicts_within(&self) -> Duration {
        Duration::from_secs(5)
    }

    /// The one deadline of each call, from when it starts: its reads, its transactions and
    /// the ones run again after conflicts all end by it, and a call still running then
    /// fails ([`ErrorKind::Unavailable`]: it may have been stored, or not; safe to retry).
    /// `None`, the default: each transaction bounds itself (a storage without I/O). A
    /// storage with a timeout setting returns it here, so that a call under contention
    /// never runs past the timeout its user set.
    fn call_timeout(&self) -> Option<Duration> {
        None
    }

    /// Where the user sets [`Storage::call_timeout`] (a builder method, a URL option), for
    /// the error of a call that reached it; `None`, the default, names nothing.
    fn call_timeout_setting(&self) -> Option<&'static str> {
        None
    }

    /// Reads the record of `key` and the clock, runs `decide` on them once, stores the
    /// record it returns and wakes whom it says, all as one atomic step; or stores nothing
    /// and answers [`Commit::Conflict`] when the record changed since the read.
    ///
    /// `op` is the operation: an [`Operation::Inspect`] never writes (its step always
    /// returns no record), so a storage may read it without the lock a write needs.
    ///
    /// # Errors
    /// What `decide` returns (nothing may be stored then), and the storage's own failures:
    /// [`ErrorKind::Unavailable`] when it cannot be reached within its deadline,
    /// [`ErrorKind::Corrupt`] when the record cannot be read.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have stored the change, never half of it.
    fn transact(
        &self,
        key: &Key,
        op: Operation,
        decide: &mut Decide<'_, TokenOf<Self>, HolderOf<Self>>,
    ) -> impl Future<Output = Result<Commit>> + Send;

    /// [`Storage::transact`] for many keys in one transaction: reads the record of each of
    /// `keys` and the clock, runs `decide(i, snapshot)` for each index `i` of `keys` in
    /// order, stores every record it returns and wakes whom they say, all as one atomic
    /// step; or stores nothing and answers [`Commit::Conflict`] when a record changed since
    /// the read. A key that appears twice is decided twice, the second time on the record
    /// the first decision returned. An error of `decide` is the adapter's to keep: the
    /// storage goes on with the next index.
    ///
    /// The adapter calls it only for a storage whose [`Capabilities::prolong_batch`] is
    /// above 1, with at most that many keys, and only for prolongs; by default it answers
    /// [`ErrorKind::Unsupported`], as a storage that keeps the default of 1 never sees.
    ///
    /// # Errors
    /// As [`Storage::transact`], for the whole batch.
    ///
    /// # Cancel safety
    /// As [`Storage::transact`]: the whole batch is stored, or none of it.
    fn transact_many(
        &self,
        keys: &[&Key],
        op: Operation,
        decide: &mut DecideMany<'_, TokenOf<Self>, HolderOf<Self>>,
    ) -> impl Future<Output = Result<Commit>> + Send {
        let _ = (keys, decide);
        std::future::ready(Err(Error::new(
            ErrorKind::Unsupported,
            Self::NAME,
            op,
            "this storage declares batched prolongs (Capabilities::prolong_batch above 1) but \
             does not implement Storage::transact_many",
        )))
    }

    /// Subscribes to releases of `key`, as [`LockBackend::subscribe`]; `Ok(None)`, the
    /// default, leaves waiters to poll.
    ///
    /// # Errors
    /// As [`LockBackend::subscribe`].
    fn subscribe_releases(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Option<ReleaseSubscription>>> + Send {
        let _ = key;
        std::future::ready(Ok(None))
    }

    /// One page of the keys it keeps a record for, as [`LockBackend::list_keys`] (the
    /// request is validated, and the adapter holds the call to [`Storage::call_timeout`]);
    /// by default [`ErrorKind::Unsupported`], as a storage whose capabilities say
    /// [`Listing::Unsupported`](super::Listing::Unsupported) must.
    ///
    /// # Errors
    /// As [`LockBackend::list_keys`].
    fn list_keys(&self, req: KeysRequest<'_>) -> impl Future<Output = Result<KeyPage>> + Send {
        let _ = req;
        std::future::ready(Err(super::listing::unsupported(Self::NAME)))
    }
}

/// [`Storage::list_keys`], validated and bounded by the storage's [`Storage::call_timeout`].
///
/// # Errors
/// As [`LockBackend::list_keys`].
pub async fn list_keys<S: Storage>(storage: &S, req: KeysRequest<'_>) -> Result<KeyPage> {
    req.validate()?;
    match storage.call_timeout() {
        None => storage.list_keys(req).await,
        Some(within) => tokio::time::timeout(within, storage.list_keys(req))
            .await
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Unavailable,
                    S::NAME,
                    Operation::List,
                    format!("no answer within the deadline of {within:?}; safe to retry"),
                ))
            }),
    }
}

/// The step answered another operation than it was asked: a bug, said as such.
fn mismatch<H>(backend: &'static str, op: Operation, answer: &Answer<'_, H>) -> Error {
    let what = match answer {
        Answer::Obtain(..) => "an obtain",
        Answer::Prolong(_) => "a prolong",
        Answer::Release(_) => "a release",
        Answer::State(_) => "a state",
    };
    Error::new(
        ErrorKind::Protocol,
        backend,
        op,
        format!("the step answered {what} to {op}"),
    )
}

/// [`LockBackend::obtain`] through `storage`: what the adapter runs. A backend that is more
/// than one storage (two variants under one type, a storage that needs the caller's key
/// prefix) calls these functions with a storage view of its own.
///
/// # Errors
/// As [`LockBackend::obtain`].
pub async fn obtain<S: Storage>(storage: &S, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
    if !storage.storage_capabilities().shared {
        req.exclusive_only(S::NAME)?;
    }
    let token = S::Codec::token(req.token);
    let holder = S::Codec::holder(S::NAME, req.holder, Operation::Obtain)?;
    let ask = Ask::Obtain(Obtain {
        token: &*token,
        holder: &*holder,
        ttl: req.ttl,
        grace: storage.grace(req.ttl),
        // Set from each snapshot.
        fencing_floor: 0,
        mode: req.mode,
        queue: req.queue,
        change: req.change.map(|f| f.0),
    });
    let op = Operation::Obtain;
    run(storage, req.key, ask, |answer| match answer {
        Answer::Obtain(outcome, ttl) => {
            outcome.try_into_outcome(ttl, S::NAME, |h| S::Codec::decode_holder(S::NAME, h, op))
        }
        other => Err(mismatch(S::NAME, op, &other)),
    })
    .await
}

/// [`LockBackend::prolongate`] through `storage`.
///
/// # Errors
/// As [`LockBackend::prolongate`].
pub async fn prolongate<S: Storage>(
    storage: &S,
    req: ProlongRequest<'_>,
) -> Result<ProlongOutcome> {
    let token = S::Codec::token(req.token);
    let ask = Ask::Prolong {
        token: &*token,
        ttl: req.ttl,
        grace: storage.grace(req.ttl),
    };
    run(storage, req.key, ask, |answer| match answer {
        Answer::Prolong(outcome) => Ok(outcome),
        other => Err(mismatch(S::NAME, Operation::Prolongate, &other)),
    })
    .await
}

/// [`LockBackend::release`] through `storage`.
///
/// # Errors
/// As [`LockBackend::release`].
pub async fn release<S: Storage>(storage: &S, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
    let token = S::Codec::token(req.token);
    let ask = Ask::Release {
        token: &*token,
        delay: req.delay_after,
    };
    run(storage, req.key, ask, |answer| match answer {
        Answer::Release(outcome) => Ok(outcome),
        other => Err(mismatch(S::NAME, Operation::Release, &other)),
    })
    .await
}

/// [`LockBackend::inspect`] through `storage`.
///
/// # Errors
/// As [`LockBackend::inspect`].
pub async fn inspect<S: Storage>(storage: &S, key: &Key) -> Result<LockState> {
    state(storage, key, Ask::Inspect).await
}

/// [`LockBackend::force_release`] through `storage`.
///
/// # Errors
/// As [`LockBackend::force_release`].
pub async fn force_release<S: Storage>(storage: &S, key: &Key) -> Result<LockState> {
    state(storage, key, Ask::Force).await
}

/// What an inspection or a forced release saw.
async fn state<S: Storage>(
    storage: &S,
    key: &Key,
    ask: Ask<'_, TokenOf<S>, HolderOf<S>>,
) -> Result<LockState> {
    let op = ask.operation();
    run(storage, key, ask, |answer| match answer {
        Answer::State(view) => view.try_into_state(|h| S::Codec::decode_holder(S::NAME, h, op)),
        other => Err(mismatch(S::NAME, op, &other)),
    })
    .await
}

#[async_trait]
impl<S: Storage + 'static> LockBackend for S {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.storage_capabilities()
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        obtain(self, req).await
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        prolongate(self, req).await
    }

    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        prolongate_many(self, reqs).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        release(self, req).await
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        inspect(self, key).await
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        force_release(self, key).await
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.subscribe_releases(key).await
    }

    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        list_keys(self, req).await
    }
}

#[cfg(test)]
mod tests;
