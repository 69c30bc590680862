//! Calls the backend applied whose reply never came back (a timeout, a cut connection after
//! the server committed), at each step of `lock_all` and of a campaign: the caller gets a
//! retry-safe error, and nothing stays held under a token nobody has.
//!
//! The client layer's recovery (give back what a failed obtain may have granted) runs on
//! every backend here, because what it relies on is the backend's: a release by the owner
//! token frees a hold whose grant the caller never saw.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::ObtainRequest;
use lock_core::{
    Error, ErrorKind, Key, LockBackend, LockState, Locker, ObtainOutcome, Operation,
    ReleaseOutcome, Result, Retry,
};

use crate::harness::ms;
use crate::pace::Pace;
use crate::{ensure, CaseResult, Failure, Suite};

/// How long the background give-backs of a failed call may take to land.
const SETTLE: Duration = Duration::from_secs(30);

/// Which obtain replies are lost: a key, and how many of its next replies.
#[derive(Debug, Clone, Default)]
struct Losses(Arc<Mutex<Option<(Key, usize)>>>);

impl Losses {
    /// Loses the replies of the next `times` obtains of `key`.
    fn lose(&self, key: &Key, times: usize) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((key.clone(), times));
    }

    /// How many replies are still to be lost.
    fn left(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, |(_, n)| *n)
    }

    /// Whether the reply of this obtain of `key` is to be lost (counting it).
    fn take(&self, key: &Key) -> bool {
        match &mut *self.0.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((lost, left)) if lost == key && *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    }
}

/// Applies every obtain, and loses the replies [`Losses`] names (a retry-safe
/// `Unavailable` instead), as a timeout after the server committed the call would.
#[derive(Debug)]
struct LosesObtainReplies {
    inner: Arc<dyn LockBackend>,
    losses: Losses,
}

#[async_trait]
impl Layer for LosesObtainReplies {
    fn inner(&self) -> &dyn LockBackend {
        &*self.inner
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let outcome = self.inner.obtain(req).await?;
        if self.losses.take(req.key) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                self.inner.name(),
                Operation::Obtain,
                "the reply was lost after the backend applied the obtain (injected)",
            ));
        }
        Ok(outcome)
    }
}

/// The losses to set, a locker over the backend that loses those replies, and the backend
/// itself.
async fn over_lost_replies(suite: &Suite) -> (Losses, Locker, Arc<dyn LockBackend>) {
    let inner = suite.harness.backend().await;
    let losses = Losses::default();
    let backend: Arc<dyn LockBackend> = Arc::new(Layered(LosesObtainReplies {
        inner: Arc::clone(&inner),
        losses: losses.clone(),
    }));
    (losses, Locker::new(backend), inner)
}

/// Waits for the client's background give-backs, then checks that each of `keys` is free.
async fn all_free(inner: &Arc<dyn LockBackend>, keys: &[Key], after: &str) -> CaseResult {
    ensure!(
        lock_core::settle(SETTLE).await,
        "{after}: the background give-backs did not end within {SETTLE:?}"
    );
    for key in keys {
        let state = inner.inspect(key).await?;
        ensure!(
            state == LockState::Free,
            "{after}: {key} is {state:?}, held under a token nobody has: the caller's retry \
             is busy until its ttl"
        );
    }
    Ok(())
}

/// The first obtain is applied by the backend, but its reply is lost (the caller sees a
/// retry-safe error); the client's retry must end holding exactly one hold, with a fencing
/// token it knows, and its release must free the key.
pub async fn obtain_retried_after_a_lost_reply_holds_once(suite: &Suite) -> CaseResult {
    let (losses, locker, inner) = over_lost_replies(suite).await;
    let key = Key::new("lost-reply")?;
    losses.lose(&key, 1);
    let Some(guard) = locker
        .lock("lost-reply")
        .wait(ms(5_000))
        .retry(Retry::linear(ms(20)))
        .obtain()
        .await?
        .obtained()
    else {
        return Err(Failure("busy with itself".into()));
    };
    ensure!(losses.left() == 0, "the obtain never asked");
    match inner.inspect(&key).await? {
        LockState::Held { holds, fencing, .. } => {
            ensure!(holds == 1, "the retried obtain left {holds} holds");
            ensure!(
                fencing == guard.fencing(),
                "the guard's fencing is not the lock's"
            );
        }
        other => return Err(Failure(format!("not held after the retry: {other:?}"))),
    }
    ensure!(
        guard.release().await? == ReleaseOutcome::Released,
        "one release frees it"
    );
    ensure!(
        inner.inspect(&key).await? == LockState::Free,
        "free after the release"
    );
    Ok(())
}

/// `lock_all` whose obtain of one key (each in turn) is applied but its reply lost: the
/// error comes back with none of the keys held, that one included, and the caller's retry
/// takes them all.
pub async fn lock_all_with_a_lost_reply_leaves_none_of_the_keys_held(suite: &Suite) -> CaseResult {
    let (layer, locker, inner) = over_lost_replies(suite).await;
    let names = ["lost-all-a", "lost-all-b", "lost-all-c"];
    let keys = names
        .map(Key::new)
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    for lost in &keys {
        layer.lose(lost, usize::MAX);
        let e = match locker.lock_all(names).try_obtain().await {
            Err(e) => e,
            Ok(attempt) => {
                return Err(Failure(format!(
                    "lock_all answered {} although the reply of {lost} was lost",
                    if attempt.is_busy() {
                        "Busy"
                    } else {
                        "Obtained"
                    }
                )))
            }
        };
        ensure!(
            e.kind() == ErrorKind::Unavailable,
            "lock_all with the reply of {lost} lost: expected the retry-safe error, got {e}"
        );
        all_free(
            &inner,
            &keys,
            &format!("after the reply of {lost} was lost"),
        )
        .await?;
        layer.lose(lost, 0);
        let Some(all) = locker.lock_all(names).try_obtain().await?.obtained() else {
            return Err(Failure(format!(
                "the caller's retry after {lost}'s lost reply is busy"
            )));
        };
        for (key, outcome) in all.release().await? {
            ensure!(
                outcome == ReleaseOutcome::Released,
                "releasing {key} after the retry: {outcome:?}"
            );
        }
    }
    Ok(())
}

/// A campaign whose obtain is applied but its reply lost: within its wait it retries and
/// leads with exactly one hold and the lock's own fencing token as its term; with no wait
/// left it fails and leaves no leadership held under a token nobody has (the next
/// candidate is elected at once).
pub async fn a_campaign_with_a_lost_reply_leads_once_or_leaves_nothing(
    suite: &Suite,
) -> CaseResult {
    let (layer, locker, inner) = over_lost_replies(suite).await;
    let t = Pace::of(
        &*inner,
        "a_campaign_with_a_lost_reply_leads_once_or_leaves_nothing",
    );
    let key = Key::new("lost-campaign")?;
    // Lost once: the retry within the wait turns the lost grant into the leadership.
    layer.lose(&key, 1);
    let leader = locker
        .elect("lost-campaign")
        .wait(t.ms(5_000))
        .retry(Retry::linear(ms(20)))
        .lead()
        .await;
    ensure!(layer.left() == 0, "the campaign never asked");
    let leader = match leader {
        Ok(attempt) => match attempt.obtained() {
            Some(leader) => leader,
            None => return Err(Failure("the campaign found itself busy".into())),
        },
        Err(e) => {
            return Err(Failure(format!(
                "the campaign's retry did not turn the lost grant into the leadership: {e}"
            )))
        }
    };
    match inner.inspect(&key).await? {
        LockState::Held { holds, fencing, .. } => {
            ensure!(holds == 1, "the retried campaign left {holds} holds");
            ensure!(
                fencing == leader.term(),
                "the leader's term {} is not the lock's fencing token {fencing}",
                leader.term()
            );
        }
        other => return Err(Failure(format!("not held by the leader: {other:?}"))),
    }
    ensure!(
        leader.resign().await? == ReleaseOutcome::Released,
        "the resignation frees the key"
    );
    // Lost with no wait left: an error, and nothing held.
    layer.lose(&key, usize::MAX);
    let failed = locker.elect("lost-campaign").wait(ms(0)).lead().await;
    ensure!(
        matches!(&failed, Err(e) if e.kind() == ErrorKind::Unavailable),
        "a campaign whose only reply was lost: expected the retry-safe error, got {:?}",
        failed.as_ref().map(|a| a.is_busy())
    );
    all_free(
        &inner,
        std::slice::from_ref(&key),
        "after the campaign's lost reply",
    )
    .await?;
    layer.lose(&key, 0);
    let Some(next) = locker
        .elect("lost-campaign")
        .wait(ms(0))
        .lead()
        .await?
        .obtained()
    else {
        return Err(Failure(
            "the next candidate is not elected at once after a lost reply".into(),
        ));
    };
    ensure!(
        next.resign().await? == ReleaseOutcome::Released,
        "the next leader's resignation frees the key"
    );
    Ok(())
}
