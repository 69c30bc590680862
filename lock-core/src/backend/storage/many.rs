//! Prolongs of many locks through the step: a storage that stores many decisions in one
//! transaction ([`Storage::transact_many`]) gets them in batches of its
//! [`Capabilities::prolong_batch`](crate::backend::Capabilities::prolong_batch); any other,
//! each in a transaction of its own, several at once. Either way every decision is the
//! step's: no backend decides a batch by hand.

use super::run::run_many;
use super::{mismatch, prolongate, Change, HolderOf, Snapshot, Storage, TokenOf};
use crate::backend::codec::Codec;
use crate::backend::rules::{Answer, Ask};
use crate::backend::{prolongate_each_with, ProlongRequest};
use crate::{Key, Operation, ProlongOutcome, Result};

/// The step a storage runs on each key of a batch: the index of the request in the batch,
/// and what the storage read for its key; it returns what to store, or an error for that
/// request alone (the storage goes on with the next).
pub type DecideMany<'s, T, H> =
    dyn for<'r> FnMut(usize, Snapshot<'r, T, H>) -> Result<Change<T, H>> + Send + 's;

/// [`LockBackend::prolongate_many`](crate::LockBackend::prolongate_many) through `storage`:
/// batches of [`Capabilities::prolong_batch`](crate::backend::Capabilities::prolong_batch)
/// through [`Storage::transact_many`] when that is above 1, else each lock on its own
/// ([`prolongate`], several at once). The answers in the order of `reqs`; a batch that
/// fails answers each of its locks with its error, and the next batch still goes.
///
/// # Cancel safety
/// Dropping the future may have prolonged any subset of the locks (whole batches); each is
/// still in a state the contract allows, and calling again is safe.
pub async fn prolongate_many<S: Storage>(
    storage: &S,
    reqs: &[ProlongRequest<'_>],
) -> Vec<Result<ProlongOutcome>> {
    let batch = storage.storage_capabilities().prolong_batch;
    if batch <= 1 {
        return prolongate_each_with(reqs, |req| prolongate(storage, req)).await;
    }
    let mut answers = Vec::with_capacity(reqs.len());
    for chunk in reqs.chunks(batch) {
        match prolong_batch(storage, chunk).await {
            Ok(each) => answers.extend(each),
            Err(e) => answers.extend(std::iter::repeat_n(Err(e), chunk.len())),
        }
    }
    answers
}

/// One transaction of prolongs.
async fn prolong_batch<S: Storage>(
    storage: &S,
    reqs: &[ProlongRequest<'_>],
) -> Result<Vec<Result<ProlongOutcome>>> {
    let tokens: Vec<_> = reqs.iter().map(|r| S::Codec::token(r.token)).collect();
    let asks: Vec<Ask<'_, TokenOf<S>, HolderOf<S>>> = reqs
        .iter()
        .zip(&tokens)
        .map(|(r, token)| Ask::Prolong {
            token: &**token,
            ttl: r.ttl,
            grace: storage.grace(r.ttl),
        })
        .collect();
    let keys: Vec<&Key> = reqs.iter().map(|r| r.key).collect();
    run_many(storage, &keys, &asks, |answer| match answer {
        Answer::Prolong(outcome) => Ok(outcome),
        other => Err(mismatch(S::NAME, Operation::Prolongate, &other)),
    })
    .await
}
