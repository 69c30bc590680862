//! Whom a decision wakes (the rules' `Wake`: one, all, nobody), in time: each waiter here
//! polls once a minute, so only a notification meets the bounds. On a backend that
//! declares release notifications, the waiters are in another backend built from the
//! harness's shared configuration, as another process's would be (with its own
//! notifications and its own waiters); on one that wakes only its own process's waiters
//! (no server notifications), in the same backend; a backend without subscriptions is
//! skipped.

use lock_core::Mode;

use super::*;
use crate::cases::shared::keeps_shared;

/// A waiter's fallback poll: far past every bound below.
const POLL: Duration = Duration::from_secs(60);

/// How soon a woken waiter must have the key (or its subscription must fire).
pub(super) const WOKEN: Duration = Duration::from_secs(10);

/// Subscriptions may take a moment to reach the server (LISTEN, SUBSCRIBE, a watch).
pub(super) const SETTLE: Duration = Duration::from_millis(500);

/// The backend that decides and the one whose waiters wait, on one namespace.
pub(super) struct Two {
    pub(super) deciding: Arc<dyn LockBackend>,
    pub(super) waiting: Arc<dyn LockBackend>,
}

impl Two {
    /// The pair for `case`, or `None` (said on stderr) when the backend has no
    /// subscriptions; a backend that declares notifications and gives none fails.
    pub(super) async fn of(suite: &Suite, case: &str, key: &str) -> Result<Option<Two>, Failure> {
        let backend = suite.harness.backend().await;
        let notifies = backend.capabilities().release_notification;
        let two = match suite.harness.shared_config().await {
            Some(config) if notifies => Two {
                deciding: suite.harness.connect(&config).await,
                waiting: suite.harness.connect(&config).await,
            },
            _ => Two {
                deciding: Arc::clone(&backend),
                waiting: backend,
            },
        };
        let probe = Key::new(key).expect("cases use valid keys");
        match two.waiting.subscribe(&probe).await? {
            Some(_) => Ok(Some(two)),
            None if notifies => Err(Failure(
                "the backend declares release notifications but subscribe answered None".into(),
            )),
            None => {
                report(format_args!(
                    "{}: {case}: skipped, the backend has no release notifications (waiters poll)",
                    suite.name
                ));
                Ok(None)
            }
        }
    }

    /// A locker on the waiting side whose waiters poll once a minute.
    fn waiting_locker(&self) -> Locker {
        Locker::new(Arc::clone(&self.waiting)).with_retry(Retry::linear(POLL).notified())
    }
}

/// A waiter's obtain of `key`, waiting up to two polls; the guard, or the failure.
fn wait_for(
    locker: Locker,
    key: &'static str,
) -> tokio::task::JoinHandle<Result<LockGuard, Failure>> {
    tokio::spawn(async move {
        let lock = locker.lock(key).ttl(LONG).wait(POLL * 2);
        match lock.obtain().await? {
            Attempt::Obtained(guard) => Ok(guard),
            Attempt::Busy(busy) => Err(Failure(format!("{key}: the waiter gave up: {busy}"))),
        }
    })
}

/// The waiter's guard, if it has the key within [`WOKEN`].
async fn woken(
    what: &str,
    waiter: tokio::task::JoinHandle<Result<LockGuard, Failure>>,
) -> Result<LockGuard, Failure> {
    match tokio::time::timeout(WOKEN, waiter).await {
        Ok(Ok(guard)) => guard,
        Ok(Err(e)) => Err(Failure(format!("{what}: the waiter's task failed: {e}"))),
        Err(_) => Err(Failure(format!(
            "{what}: not woken within {WOKEN:?} (its poll is {POLL:?}): the release \
             notification did not reach it"
        ))),
    }
}

/// An exclusive release wakes a waiter (the rules' `Wake::One`), of another process where
/// the backend notifies across processes: it has the key at once, not at its poll.
pub async fn a_release_wakes_a_waiter_at_once(suite: &Suite) -> CaseResult {
    let case = "a_release_wakes_a_waiter_at_once";
    let Some(two) = Two::of(suite, case, "wake-one").await? else {
        return Ok(());
    };
    let holder = Owner::new(&two.deciding, "wake-one", "holder");
    acquired(holder.obtain(LONG).await?, "the holder")?;
    let waiter = wait_for(two.waiting_locker(), "wake-one");
    tokio::time::sleep(SETTLE).await;
    ensure!(!waiter.is_finished(), "the waiter got a held key");
    let released = holder.release(None).await?;
    ensure!(
        released == ReleaseOutcome::Released,
        "the release: {released:?}"
    );
    let guard = woken("after an exclusive release", waiter).await?;
    let _ = guard.release().await?;
    Ok(())
}

/// An exclusive release wakes one waiter of a process, not two (the rules' `Wake::One`):
/// here the waiters are in the process that releases, where a backend that wakes them
/// directly and again when its own notification comes back wakes a second waiter for the
/// one that can get in (each extra wake-up is an attempt that finds the key busy). The two
/// subscribe at once, as waiters that queue together do: a backend that gives each its own
/// feed from the server wakes both.
pub async fn a_release_wakes_one_waiter_not_two(suite: &Suite) -> CaseResult {
    let case = "a_release_wakes_one_waiter_not_two";
    let Some(two) = Two::of(suite, case, "wake-once").await? else {
        return Ok(());
    };
    let backend = &two.deciding;
    if crate::as_semaphore::holds_as_shares(backend) {
        report(format_args!(
            "{}: {case}: skipped, the locks are permits of semaphores here, and the release \
             of a share wakes every waiter",
            suite.name
        ));
        return Ok(());
    }
    let holder = Owner::new(backend, "wake-once", "holder");
    acquired(holder.obtain(LONG).await?, "the holder")?;
    let (a, b) = tokio::join!(
        backend.subscribe(&holder.key),
        backend.subscribe(&holder.key)
    );
    let mut waiting = Vec::new();
    for sub in [a?, b?] {
        waiting.push(sub.ok_or_else(|| Failure("subscribe answered None".into()))?);
    }
    tokio::time::sleep(SETTLE).await;
    let released = holder.release(None).await?;
    ensure!(
        released == ReleaseOutcome::Released,
        "the release: {released:?}"
    );
    let until = Instant::now() + WOKEN;
    let mut woken = [false; 2];
    while woken == [false; 2] && Instant::now() < until {
        for (sub, woken) in waiting.iter_mut().zip(&mut woken) {
            *woken = sub.released_within(ms(20)).await;
        }
    }
    let Some(asleep) = woken.iter().position(|w| !w) else {
        return Err(Failure(
            "one exclusive release woke two waiters of the releasing process: one can get in"
                .into(),
        ));
    };
    ensure!(
        woken.contains(&true),
        "neither waiter was woken by the release within {WOKEN:?}"
    );
    ensure!(
        !waiting[asleep].released_within(ms(1_000)).await,
        "one exclusive release woke two waiters of the releasing process: one can get in"
    );
    Ok(())
}

/// The last share leaving beside a waiting writer's marker wakes every waiter (the rules'
/// `Wake::All`): the one that can get in, the writer, need not be first in line.
pub async fn the_last_share_beside_a_writer_wakes_every_waiter(suite: &Suite) -> CaseResult {
    let case = "the_last_share_beside_a_writer_wakes_every_waiter";
    if keeps_shared(suite, case).await.is_none() {
        return Ok(());
    }
    let Some(two) = Two::of(suite, case, "wake-all").await? else {
        return Ok(());
    };
    let reader = Owner::new(&two.deciding, "wake-all", "reader");
    let writer = Owner::new(&two.waiting, "wake-all", "writer");
    acquired(
        reader.obtain_as(LONG, Mode::READ, false).await?,
        "the reader",
    )?;
    let queued = writer.obtain_as(LONG, Mode::Exclusive, true).await?;
    ensure!(busy(&queued), "the writer beside a reader: {queued:?}");
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let sub = two.waiting.subscribe(&writer.key).await?;
        waiting.push(sub.ok_or_else(|| Failure("subscribe answered None".into()))?);
    }
    tokio::time::sleep(SETTLE).await;
    let released = reader.release(None).await?;
    ensure!(
        released == ReleaseOutcome::Released,
        "the last share's release: {released:?}"
    );
    for (i, sub) in waiting.iter_mut().enumerate() {
        ensure!(
            sub.released_within(WOKEN).await,
            "waiter {} of 2 was not woken by the last share's release beside a writer",
            i + 1
        );
    }
    let _ = writer.release(None).await?;
    Ok(())
}

/// A forced release wakes every waiter (the rules' `Wake::All`): an operator who breaks a
/// stuck lock lets its waiters in at once, in every process, not at their poll.
pub async fn a_forced_release_wakes_every_waiter(suite: &Suite) -> CaseResult {
    let case = "a_forced_release_wakes_every_waiter";
    let Some(two) = Two::of(suite, case, "wake-forced").await? else {
        return Ok(());
    };
    let holder = Owner::new(&two.deciding, "wake-forced", "holder");
    acquired(holder.obtain(LONG).await?, "the holder")?;
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let sub = two.waiting.subscribe(&holder.key).await?;
        waiting.push(sub.ok_or_else(|| Failure("subscribe answered None".into()))?);
    }
    tokio::time::sleep(SETTLE).await;
    two.deciding.force_release(&holder.key).await?;
    for (i, sub) in waiting.iter_mut().enumerate() {
        ensure!(
            sub.released_within(WOKEN).await,
            "waiter {} of 2 was not woken by a forced release",
            i + 1
        );
    }
    Ok(())
}

/// A resignation wakes the candidate that waits, not an observer of the same process that
/// subscribed before it (the docs' own shape: one locker observes and campaigns); the
/// candidate leads at once, and the observer sees it.
pub async fn a_resignation_wakes_the_candidate_not_the_observer(suite: &Suite) -> CaseResult {
    let case = "a_resignation_wakes_the_candidate_not_the_observer";
    let Some(two) = Two::of(suite, case, "elect-wake").await? else {
        return Ok(());
    };
    let leader = Locker::new(Arc::clone(&two.deciding))
        .elect("elect-wake")
        .ttl(LONG)
        .lead()
        .await?
        .obtained()
        .ok_or_else(|| Failure("the first candidate of a fresh key is busy".into()))?;
    let locker = two.waiting_locker();
    let mut observer = locker.observe("elect-wake")?.every(POLL);
    let seen = observer.changed().await?;
    ensure!(
        seen.as_ref().map(|l| l.term) == Some(leader.term()),
        "the observer sees the leader: {seen:?}"
    );
    let candidate = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .elect("elect-wake")
                .ttl(LONG)
                .wait(POLL * 2)
                .lead()
                .await
        })
    };
    tokio::time::sleep(SETTLE).await;
    ensure!(
        !candidate.is_finished(),
        "the candidate led beside the leader"
    );
    let term = leader.term();
    let resigned = leader.resign().await?;
    ensure!(
        resigned == ReleaseOutcome::Released,
        "the resignation: {resigned:?}"
    );
    let next = match tokio::time::timeout(WOKEN, candidate).await {
        Ok(Ok(Ok(Attempt::Obtained(next)))) => next,
        Ok(Ok(other)) => return Err(Failure(format!("the candidate's campaign: {other:?}"))),
        Ok(Err(e)) => return Err(Failure(format!("the candidate's task: {e}"))),
        Err(_) => {
            return Err(Failure(format!(
                "the candidate did not lead within {WOKEN:?} of the resignation (its poll is \
                 {POLL:?}): the notification woke the observer in its place"
            )))
        }
    };
    ensure!(
        next.term() > term,
        "the new term {} after {term}",
        next.term()
    );
    let _ = next.resign().await?;
    Ok(())
}

/// What frees no room wakes nobody (the rules' `Wake::Nobody`): a prolong, a reentrant
/// obtain, a busy obtain and an inspection leave a subscriber asleep; the release then
/// wakes it.
pub async fn what_frees_nothing_wakes_nobody(suite: &Suite) -> CaseResult {
    let case = "what_frees_nothing_wakes_nobody";
    let Some(two) = Two::of(suite, case, "wake-none").await? else {
        return Ok(());
    };
    let holder = Owner::new(&two.deciding, "wake-none", "holder");
    let other = Owner::new(&two.deciding, "wake-none", "other");
    acquired(holder.obtain(LONG).await?, "the holder")?;
    // An admission may wake one waiter (a shared hold's: the next may be a reader): its
    // notification is delivered before the subscriber comes.
    tokio::time::sleep(SETTLE).await;
    let mut sub = two
        .waiting
        .subscribe(&holder.key)
        .await?
        .ok_or_else(|| Failure("subscribe answered None".into()))?;
    tokio::time::sleep(SETTLE).await;
    let quiet = ms(500);
    let prolonged = holder.prolong(LONG).await?;
    ensure!(
        prolonged == ProlongOutcome::Prolonged,
        "the prolong: {prolonged:?}"
    );
    ensure!(
        !sub.released_within(quiet).await,
        "a subscriber was woken by a prolong"
    );
    let again = holder.obtain(LONG).await?;
    ensure!(
        again == ObtainOutcome::Reacquired { holds: 2 },
        "the reentrant obtain: {again:?}"
    );
    ensure!(
        !sub.released_within(quiet).await,
        "a subscriber was woken by a reentrant obtain"
    );
    let refused = other.obtain(LONG).await?;
    ensure!(busy(&refused), "another owner's obtain: {refused:?}");
    let _ = holder.inspect().await?;
    ensure!(
        !sub.released_within(quiet).await,
        "a subscriber was woken by a busy obtain or an inspection"
    );
    let decremented = holder.release(None).await?;
    ensure!(
        decremented == ReleaseOutcome::Decremented { holds: 1 },
        "one of two holds released: {decremented:?}"
    );
    ensure!(
        !sub.released_within(ms(1_000)).await,
        "a subscriber was woken by a release that left the key held"
    );
    let released = holder.release(None).await?;
    ensure!(
        released == ReleaseOutcome::Released,
        "the release: {released:?}"
    );
    ensure!(
        sub.released_within(WOKEN).await,
        "the subscriber was not woken by the release that freed the key"
    );
    Ok(())
}
