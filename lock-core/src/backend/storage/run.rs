//! The adapter's loop for one call: the step run on each read, again after each lost
//! transaction, all within the call's one deadline ([`Storage::call_timeout`]).

use std::time::Duration;

use super::{Change, Commit, Snapshot, Storage};
use crate::backend::rules::{step, Answer, Ask};
use crate::{Error, ErrorKind, Key, Operation, Result};

/// The pause before the transaction that follows `conflicts` lost ones: full jitter under
/// 100 µs doubled per conflict, at most 20 ms.
pub(super) fn conflict_pause(conflicts: u32) -> Duration {
    let ceiling = (100u64 << conflicts.min(16)).min(20_000);
    Duration::from_micros(fastrand::u64(0..=ceiling))
}

/// Runs `ask` on `key` through `storage`: the step on every read, again after each
/// conflict, for at most [`Storage::conflicts_within`]; `answer` turns the step's answer
/// into the operation's outcome while the record it borrows from is at hand.
pub(super) async fn run<S: Storage, O: Send>(
    storage: &S,
    key: &Key,
    ask: Ask<'_, S::Token, S::Holder>,
    answer: impl for<'r> Fn(Answer<'r, S::Holder>) -> Result<O> + Send + Sync,
) -> Result<O> {
    let op = ask.operation();
    let timeout = storage.call_timeout();
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    // Read on the first conflict only: an uncontended call reads no clock of its own.
    let mut started = None;
    let mut conflicts = 0u32;
    loop {
        let mut outcome = None;
        let mut decide = |snap: Snapshot<'_, S::Token, S::Holder>| {
            let mut ask = ask;
            if let Ask::Obtain(obtain) = &mut ask {
                obtain.fencing_floor = snap.fencing_floor;
            }
            let d = step(snap.record, snap.clock, ask);
            outcome = Some(answer(d.outcome)?);
            Ok(Change {
                write: d.write,
                wake: d.wake,
            })
        };
        let transact = storage.transact(key, op, &mut decide);
        let commit = match deadline {
            None => transact.await?,
            Some(deadline) => match tokio::time::timeout_at(deadline, transact).await {
                Ok(commit) => commit?,
                Err(_) => return Err(past_deadline::<S>(op, timeout, conflicts)),
            },
        };
        match commit {
            Commit::Done => {
                return outcome.ok_or_else(|| {
                    Error::new(
                        ErrorKind::Protocol,
                        S::NAME,
                        op,
                        "the storage committed without running the step (a bug in its transact)",
                    )
                })
            }
            Commit::Conflict => {}
        }
        conflicts += 1;
        let within = storage.conflicts_within();
        let started = *started.get_or_insert_with(tokio::time::Instant::now);
        let pause = conflict_pause(conflicts);
        if deadline.is_some_and(|d| tokio::time::Instant::now() + pause >= d) {
            return Err(past_deadline::<S>(op, timeout, conflicts));
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
        tracing::debug!(conflicts, key = %key, "transaction lost to a concurrent writer");
        tokio::time::sleep(pause).await;
    }
}

/// A call that reached its deadline ([`Storage::call_timeout`]) after `conflicts` lost
/// transactions, or in the middle of one.
fn past_deadline<S: Storage>(op: Operation, timeout: Option<Duration>, conflicts: u32) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        S::NAME,
        op,
        format!(
            "no answer within the call's deadline of {:?} ({conflicts} transactions lost to              concurrent writers of the key before it); the last may or may not have been              stored: safe to retry",
            timeout.unwrap_or_default()
        ),
    )
}
