//! A backend whose server decides: a routine on the server (a Lua script, a PL/pgSQL
//! function, a stored procedure) that is a remote [`step`](super::rules::step), beside the
//! [storage](super::storage::Storage) the client decides on when the routine cannot.
//!
//! A [`Routine`] takes the step's request vocabulary ([`Ask`]) and answers
//! [`Verdict::Decided`] with the contract's outcome (a [`Reply`]), in one round trip, or
//! [`Verdict::Defer`]: it wrote nothing, and the client decides on the storage (the record
//! holds shares or a waiting writer's marker, which routines leave to the rules, or the
//! routine cannot be called). [`Routed`] is the backend over one: it owns, once, what every
//! such backend otherwise writes by hand:
//!
//! - **the hint**: shared requests and mode changes go to the storage at once (routines
//!   decide exclusive holds), and so do the prolongs and releases of a shared hold this
//!   backend obtained, instead of hearing `defer` first;
//! - **the fallback**: after `defer`, the storage's path ([`storage::obtain`] and the rest);
//! - **the one deadline**: the routine's call and the fallback after it end by one deadline
//!   from the call's start ([`Routine::timeout`]);
//! - **the wake rule**: a decided release of an exclusive hold frees room for one waiter, a
//!   decided forced release for all ([`Routine::woken`]); the storage's path wakes whom
//!   the step says;
//! - **batches**: prolongs in chunks of [`Routine::BATCH`] through
//!   [`Routine::decide_many`], and what it defers through [`storage::prolongate_many`].
//!
//! Postgres's function and MariaDB's procedure are routines: see each crate's
//! `routine.rs`.
//!
//! # Cancel safety
//! Every method of [`Routed`] is as cancel safe as the routine's call and the storage's
//! transaction it runs: dropping the future may or may not have applied the operation,
//! never half of it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::codec::Codec;
use super::rules::{Ask, Obtain, Reply, Wake};
use super::storage::{self, HolderOf, Storage, TokenOf};
use super::{
    async_trait, Capabilities, KeyPage, KeysRequest, LockBackend, ObtainRequest, ProlongRequest,
    ReleaseRequest, ReleaseSubscription,
};
use crate::{
    Error, ErrorKind, Key, LockState, ObtainOutcome, Operation, ProlongOutcome, ReleaseOutcome,
    Result,
};

mod hint;
use hint::SharedTokens;

/// A routine's answer: decided on the server, or left to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<O> {
    /// The routine decided and committed: this is the outcome.
    Decided(O),
    /// The routine wrote nothing: the client decides, on the storage.
    Defer,
}

/// One request of a batch: the key, and what is asked of it.
pub type Asked<'a, T, H> = (&'a Key, Ask<'a, T, H>);

/// A routine on the server that decides exclusive holds in one round trip, and defers
/// anything else to the storage it is also (see the [module](self) docs).
///
/// A routine answers [`Verdict::Defer`] rather than decide a record with shares or a
/// waiting writer's marker; it may defer anything else too (a request it has no call for,
/// a routine missing on the server), at the cost of a round trip. What it decides, it
/// decides as the rules do (the decision table checks each routine against them), and it
/// commits before it answers.
pub trait Routine: Storage {
    /// The most prolongs one call of [`Routine::decide_many`] carries, and the batch the
    /// backend declares ([`Capabilities::prolong_batch`]).
    const BATCH: usize;

    /// Runs the routine on `ask` for `key`, by `deadline`: its decision, committed, or
    /// [`Verdict::Defer`] (nothing written).
    ///
    /// # Errors
    /// As the operation's ([`LockBackend::obtain`] and the rest).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have applied the decision, never half of it.
    fn decide(
        &self,
        key: &Key,
        ask: Ask<'_, TokenOf<Self>, HolderOf<Self>>,
        deadline: Instant,
    ) -> impl Future<Output = Result<Verdict<Reply>>> + Send;

    /// Runs the routine on many prolongs ([`Ask::Prolong`], at most [`Routine::BATCH`]) by
    /// `deadline`, one verdict per request in their order. By default it defers them all
    /// without a round trip, and the storage prolongs them ([`storage::prolongate_many`]).
    ///
    /// # Errors
    /// As [`LockBackend::prolongate`], for the whole batch.
    ///
    /// # Cancel safety
    /// Dropping the future may have applied the batch, or not.
    fn decide_many(
        &self,
        asks: &[Asked<'_, TokenOf<Self>, HolderOf<Self>>],
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<Verdict<ProlongOutcome>>>> + Send {
        let _ = deadline;
        std::future::ready(Ok(vec![Verdict::Defer; asks.len()]))
    }

    /// The one deadline of each call, from its start: the routine's call and the storage's
    /// path after a `defer` both end by it.
    fn timeout(&self) -> Duration;

    /// The error of a call that reached its deadline (it may or may not have been applied:
    /// [`ErrorKind::Unavailable`], safe to retry), naming where the user sets it.
    fn past_deadline(&self, op: Operation) -> Error {
        Error::new(
            ErrorKind::Unavailable,
            Self::NAME,
            op,
            format!(
                "no answer within the deadline of {:?}; it is safe to retry",
                self.timeout()
            ),
        )
    }

    /// Wakes this process's waiters of `key` after a decision of the routine committed
    /// (`wake` is whom it frees room for). A routine that notifies every process itself
    /// wakes nobody here. The storage's path wakes whom the step says, in its transaction.
    fn woken(&self, key: &Key, wake: Wake) {
        let _ = (key, wake);
    }
}

/// The backend over a [`Routine`]: see the [module](self) docs. Clones share the routine
/// and the hint.
#[derive(Debug)]
pub struct Routed<R> {
    routine: Arc<R>,
    hint: Arc<SharedTokens>,
}

impl<R> Clone for Routed<R> {
    fn clone(&self) -> Self {
        Routed {
            routine: Arc::clone(&self.routine),
            hint: Arc::clone(&self.hint),
        }
    }
}

impl<R: Routine> Routed<R> {
    /// The backend over `routine`.
    pub fn new(routine: Arc<R>) -> Self {
        Routed {
            routine,
            hint: Arc::default(),
        }
    }

    /// The routine (and storage).
    pub fn routine(&self) -> &Arc<R> {
        &self.routine
    }

    /// [`LockBackend::obtain`]: a shared request or a mode change on the storage; an
    /// exclusive one through the routine, then the storage if it defers.
    ///
    /// # Errors
    /// As [`LockBackend::obtain`].
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have taken the lock (the routine's call or the
    /// storage's transaction may have committed); [`Locker`](crate::Locker) cleans up an
    /// obtain whose future was dropped.
    pub async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let r = &*self.routine;
        req.mode.check(R::NAME)?;
        if req.mode.is_shared() || req.change.is_some() {
            return self.hint.obtain(r, req).await;
        }
        let token = R::Codec::token(req.token);
        let holder = R::Codec::holder(R::NAME, req.holder, Operation::Obtain)?;
        let ask = Ask::Obtain(Obtain {
            token: &*token,
            holder: &*holder,
            ttl: req.ttl,
            grace: r.grace(req.ttl),
            // The routine reads its own clock.
            fencing_floor: 0,
            mode: req.mode,
            queue: req.queue,
            change: None,
        });
        let fallback = || storage::obtain(r, req);
        self.route(req.key, ask, fallback, |reply| reply.into_obtain(R::NAME))
            .await
    }

    /// [`LockBackend::prolongate`]: a shared hold this backend obtained on the storage;
    /// any other through the routine, then the storage if it defers.
    ///
    /// # Errors
    /// As [`LockBackend::prolongate`].
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have prolonged the hold; either is a state the
    /// contract allows, and calling again is safe.
    pub async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        let r = &*self.routine;
        if let Some(outcome) = self.hint.prolongate(r, req).await {
            return outcome;
        }
        let token = R::Codec::token(req.token);
        let ask = Ask::Prolong {
            token: &*token,
            ttl: req.ttl,
            grace: r.grace(req.ttl),
        };
        let fallback = || storage::prolongate(r, req);
        self.route(req.key, ask, fallback, |reply| reply.into_prolong(R::NAME))
            .await
    }

    /// [`LockBackend::prolongate_many`]: chunks of [`Routine::BATCH`] through
    /// [`Routine::decide_many`], each by a deadline of its own; what it defers through
    /// [`storage::prolongate_many`] by the same deadline. A chunk that fails answers each
    /// of its locks with its error, and the next chunk still goes.
    ///
    /// # Cancel safety
    /// Dropping the future may have prolonged any subset of the locks; each is still in a
    /// state the contract allows, and calling again is safe.
    pub async fn prolongate_many(
        &self,
        reqs: &[ProlongRequest<'_>],
    ) -> Vec<Result<ProlongOutcome>> {
        let mut answers = Vec::with_capacity(reqs.len());
        for chunk in reqs.chunks(R::BATCH.max(1)) {
            match self.prolong_chunk(chunk).await {
                Ok(each) => answers.extend(each),
                Err(e) => answers.extend(std::iter::repeat_n(Err(e), chunk.len())),
            }
        }
        answers
    }

    async fn prolong_chunk(
        &self,
        reqs: &[ProlongRequest<'_>],
    ) -> Result<Vec<Result<ProlongOutcome>>> {
        let (r, op) = (&*self.routine, Operation::Prolongate);
        let deadline = Instant::now() + r.timeout();
        let tokens: Vec<_> = reqs.iter().map(|req| R::Codec::token(req.token)).collect();
        let asks: Vec<_> = reqs
            .iter()
            .zip(&tokens)
            .map(|(req, token)| {
                let ask = Ask::Prolong {
                    token: &**token,
                    ttl: req.ttl,
                    grace: r.grace(req.ttl),
                };
                (req.key, ask)
            })
            .collect();
        let verdicts = self
            .within(op, deadline, r.decide_many(&asks, deadline))
            .await??;
        if verdicts.len() != reqs.len() {
            return Err(Error::new(
                ErrorKind::Protocol,
                R::NAME,
                op,
                format!("{} answers for {} prolongs", verdicts.len(), reqs.len()),
            ));
        }
        let mut answers = Vec::with_capacity(reqs.len());
        let mut deferred = Vec::new();
        for (i, verdict) in verdicts.into_iter().enumerate() {
            match verdict {
                Verdict::Decided(outcome) => answers.push(Ok(outcome)),
                Verdict::Defer => {
                    deferred.push(i);
                    answers.push(Ok(ProlongOutcome::Lost));
                }
            }
        }
        if !deferred.is_empty() {
            let rest: Vec<ProlongRequest<'_>> = deferred.iter().map(|&i| reqs[i]).collect();
            // Past the deadline only the deferred locks fail: what the routine decided is
            // committed, and its answers stand.
            match self
                .within(op, deadline, storage::prolongate_many(r, &rest))
                .await
            {
                Ok(each) => {
                    for (i, answer) in deferred.into_iter().zip(each) {
                        answers[i] = answer;
                    }
                }
                Err(e) => {
                    for i in deferred {
                        answers[i] = Err(e.clone());
                    }
                }
            }
        }
        Ok(answers)
    }

    /// [`LockBackend::release`]: a shared hold this backend obtained on the storage; any
    /// other through the routine (an exclusive hold freed wakes one waiter), then the
    /// storage if it defers.
    ///
    /// # Errors
    /// As [`LockBackend::release`].
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have released the hold; calling again is safe
    /// (a release that already happened answers `Lost`).
    pub async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        let r = &*self.routine;
        if let Some(outcome) = self.hint.release(r, req).await {
            return outcome;
        }
        let token = R::Codec::token(req.token);
        let ask = Ask::Release {
            token: &*token,
            delay: req.delay_after,
        };
        let fallback = || storage::release(r, req);
        self.route(req.key, ask, fallback, |reply| {
            let outcome = reply.into_release(R::NAME)?;
            if matches!(
                outcome,
                ReleaseOutcome::Released | ReleaseOutcome::ReleasedLate
            ) {
                // The routine decides exclusive holds only: one waiter can get in.
                r.woken(req.key, Wake::One);
            }
            Ok(outcome)
        })
        .await
    }

    /// [`LockBackend::inspect`]: through the routine, then the storage if it defers.
    ///
    /// # Errors
    /// As [`LockBackend::inspect`].
    ///
    /// # Cancel safety
    /// Cancel safe: an inspection writes nothing.
    pub async fn inspect(&self, key: &Key) -> Result<LockState> {
        let r = &*self.routine;
        let fallback = || storage::inspect(r, key);
        self.route(key, Ask::Inspect, fallback, |reply| {
            reply.into_state(R::NAME, Operation::Inspect)
        })
        .await
    }

    /// [`LockBackend::force_release`]: through the routine (every waiter woken), then the
    /// storage if it defers.
    ///
    /// # Errors
    /// As [`LockBackend::force_release`].
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have broken the hold, never half of it.
    pub async fn force_release(&self, key: &Key) -> Result<LockState> {
        let r = &*self.routine;
        let fallback = || storage::force_release(r, key);
        self.route(key, Ask::Force, fallback, |reply| {
            let state = reply.into_state(R::NAME, Operation::ForceRelease)?;
            r.woken(key, Wake::All);
            Ok(state)
        })
        .await
    }

    /// The routine on `ask`, then `fallback` if it defers, all by one deadline; `take`
    /// turns what the routine decided into the operation's outcome (a reply to another
    /// operation is a bug, said as [`ErrorKind::Protocol`]).
    async fn route<O, F>(
        &self,
        key: &Key,
        ask: Ask<'_, TokenOf<R>, HolderOf<R>>,
        fallback: impl FnOnce() -> F,
        take: impl FnOnce(Reply) -> Result<O>,
    ) -> Result<O>
    where
        F: Future<Output = Result<O>>,
    {
        let (r, op) = (&*self.routine, ask.operation());
        let deadline = Instant::now() + r.timeout();
        match self
            .within(op, deadline, r.decide(key, ask, deadline))
            .await??
        {
            Verdict::Decided(reply) => take(reply),
            Verdict::Defer => self.within(op, deadline, fallback()).await?,
        }
    }

    async fn within<T>(
        &self,
        op: Operation,
        deadline: Instant,
        fut: impl Future<Output = T>,
    ) -> Result<T> {
        tokio::time::timeout_at(deadline, fut)
            .await
            .map_err(|_| self.routine.past_deadline(op))
    }
}

#[async_trait]
impl<R: Routine + 'static> LockBackend for Routed<R> {
    fn name(&self) -> &'static str {
        R::NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.routine.storage_capabilities().prolong_batch(R::BATCH)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        Routed::obtain(self, req).await
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        Routed::prolongate(self, req).await
    }

    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        Routed::prolongate_many(self, reqs).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        Routed::release(self, req).await
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        Routed::inspect(self, key).await
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        Routed::force_release(self, key).await
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.routine.subscribe_releases(key).await
    }

    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        storage::list_keys(&*self.routine, req).await
    }
}
