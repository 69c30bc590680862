//! The adapter's loop for one call: the step run on each read, again after each lost
//! transaction, all within the call's one deadline ([`Storage::call_timeout`]). A batch
//! ([`run_many`]) runs the same loop around one transaction of many keys.

use std::future::Future;
use std::time::Duration;

use super::{Change, Commit, HolderOf, Snapshot, Storage, TokenOf};
use crate::backend::rules::{step, Answer, Ask, Decision};
use crate::{Error, ErrorKind, Key, Operation, Result};

/// The pause before the transaction that follows `conflicts` lost ones: full jitter under
/// 100 µs doubled per conflict, at most 20 ms.
pub(super) fn conflict_pause(conflicts: u32) -> Duration {
    let ceiling = (100u64 << conflicts.min(16)).min(20_000);
    Duration::from_micros(fastrand::u64(0..=ceiling))
}

/// The step with the snapshot's fencing floor, on the snapshot's record and clock.
fn decide_on<'r, T: Clone + PartialEq, H: Clone>(
    mut ask: Ask<'_, T, H>,
    snap: Snapshot<'r, T, H>,
) -> Decision<Answer<'r, H>, T, H> {
    if let Ask::Obtain(obtain) = &mut ask {
        obtain.fencing_floor = snap.fencing_floor;
    }
    step(snap.record, snap.clock, ask)
}

/// Runs `ask` on `key` through `storage`: the step on every read, again after each
/// conflict, for at most [`Storage::conflicts_within`]; `answer` turns the step's answer
/// into the operation's outcome while the record it borrows from is at hand.
pub(super) async fn run<S: Storage, O: Send>(
    storage: &S,
    key: &Key,
    ask: Ask<'_, TokenOf<S>, HolderOf<S>>,
    answer: impl for<'r> Fn(Answer<'r, HolderOf<S>>) -> Result<O> + Send + Sync,
) -> Result<O> {
    let op = ask.operation();
    let mut tries = Tries::new(storage);
    loop {
        let mut outcome = None;
        let mut decide = |snap: Snapshot<'_, TokenOf<S>, HolderOf<S>>| {
            let d = decide_on(ask, snap);
            outcome = Some(answer(d.outcome)?);
            Ok(Change {
                write: d.write,
                wake: d.wake,
            })
        };
        match tries
            .transact(op, storage.transact(key, op, &mut decide))
            .await?
        {
            Commit::Done => return outcome.ok_or_else(|| not_run::<S>(op)),
            Commit::Conflict => tries.after_conflict(op, key.as_str()).await?,
        }
    }
}

/// [`run`] for many requests on many keys in one transaction
/// ([`Storage::transact_many`]): the step on each key's read, in the order of `asks`, and
/// the whole batch again after a conflict. The answers in the order of `asks`.
pub(super) async fn run_many<S: Storage, O: Send>(
    storage: &S,
    keys: &[&Key],
    asks: &[Ask<'_, TokenOf<S>, HolderOf<S>>],
    answer: impl for<'r> Fn(Answer<'r, HolderOf<S>>) -> Result<O> + Send + Sync,
) -> Result<Vec<Result<O>>> {
    let op = Operation::Prolongate;
    let mut tries = Tries::new(storage);
    loop {
        let mut outcomes: Vec<Option<Result<O>>> = Vec::new();
        outcomes.resize_with(asks.len(), || None);
        let mut decide = |i: usize, snap: Snapshot<'_, TokenOf<S>, HolderOf<S>>| {
            let Some(ask) = asks.get(i) else {
                return Err(Error::new(
                    ErrorKind::Protocol,
                    S::NAME,
                    op,
                    format!(
                        "the storage decided request {i} of a batch of {}",
                        asks.len()
                    ),
                ));
            };
            let d = decide_on(*ask, snap);
            // A request the step refuses (a holder that cannot be read) fails alone: the
            // batch's other decisions are still stored.
            outcomes[i] = Some(answer(d.outcome));
            Ok(Change {
                write: d.write,
                wake: d.wake,
            })
        };
        let commit = storage.transact_many(keys, op, &mut decide);
        match tries.transact(op, commit).await? {
            Commit::Done => {
                return outcomes
                    .into_iter()
                    .map(|o| o.ok_or_else(|| not_run::<S>(op)))
                    .collect::<Result<Vec<_>>>()
            }
            Commit::Conflict => tries.after_conflict(op, "a batch").await?,
        }
    }
}

/// The storage committed without running the step on every request: a bug in it.
fn not_run<S: Storage>(op: Operation) -> Error {
    Error::new(
        ErrorKind::Protocol,
        S::NAME,
        op,
        "the storage committed without running the step (a bug in its transact)",
    )
}

/// A call's transactions so far: its deadline, and the conflicts it lost.
struct Tries<'s, S> {
    storage: &'s S,
    timeout: Option<Duration>,
    deadline: Option<tokio::time::Instant>,
    /// Read on the first conflict only: an uncontended call reads no clock of its own.
    started: Option<tokio::time::Instant>,
    conflicts: u32,
}

impl<'s, S: Storage> Tries<'s, S> {
    fn new(storage: &'s S) -> Self {
        let timeout = storage.call_timeout();
        Tries {
            storage,
            timeout,
            deadline: timeout.map(|t| tokio::time::Instant::now() + t),
            started: None,
            conflicts: 0,
        }
    }

    /// One transaction, cut at the call's deadline.
    async fn transact(
        &self,
        op: Operation,
        transact: impl Future<Output = Result<Commit>>,
    ) -> Result<Commit> {
        match self.deadline {
            None => transact.await,
            Some(deadline) => match tokio::time::timeout_at(deadline, transact).await {
                Ok(commit) => commit,
                Err(_) => Err(self.past_deadline(op)),
            },
        }
    }

    /// After a lost transaction: the jittered pause before the next, or the error that
    /// ends the call (its deadline would pass in the pause, or the conflicts lasted
    /// [`Storage::conflicts_within`]).
    async fn after_conflict(&mut self, op: Operation, what: &str) -> Result<()> {
        self.conflicts += 1;
        let conflicts = self.conflicts;
        let within = self.storage.conflicts_within();
        let started = *self.started.get_or_insert_with(tokio::time::Instant::now);
        let pause = conflict_pause(conflicts);
        if self
            .deadline
            .is_some_and(|d| tokio::time::Instant::now() + pause >= d)
        {
            return Err(self.past_deadline(op));
        }
        if started.elapsed() >= within {
            return Err(Error::new(
                ErrorKind::Unavailable,
                S::NAME,
                op,
                format!(
                    "{conflicts} transactions in a row lost to concurrent writers of the same \
                     key within {within:?}; nothing was written by this call, which is safe \
                     to retry"
                ),
            ));
        }
        tracing::debug!(conflicts, key = %what, "transaction lost to a concurrent writer");
        tokio::time::sleep(pause).await;
        Ok(())
    }

    /// The call reached its deadline ([`Storage::call_timeout`]) after its conflicts, or
    /// in the middle of a transaction.
    fn past_deadline(&self, op: Operation) -> Error {
        Error::new(
            ErrorKind::Unavailable,
            S::NAME,
            op,
            format!(
                "no answer within the call's deadline of {:?}{} ({} transactions lost to \
                 concurrent writers of the key before it); the last may or may not have been \
                 stored: safe to retry",
                self.timeout.unwrap_or_default(),
                self.storage
                    .call_timeout_setting()
                    .map_or_else(String::new, |setting| format!(", set by {setting}")),
                self.conflicts
            ),
        )
    }
}
