//! The contract on a bad day: a partition during a hold, during an obtain and during a
//! release; a slow server; futures dropped mid-flight. Replies lost after the backend
//! applied the call are `lost_replies.rs`'.
//!
//! The network cases need [`Harness::behind_faults`](crate::Harness::behind_faults) (a
//! proxy between the backend and its server); a backend without a network skips them, a
//! networked backend whose harness does not offer it fails them. The cancellation cases
//! run on every backend.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Attempt, ErrorKind, Key, LockState, Locker, ObtainOutcome, ReleaseOutcome};
use tokio::time::Instant;

use crate::counts::{read, Counts};
use crate::harness::{ms, Faulty, Owner};
use crate::{ensure, CaseResult, Failure, Suite};

/// How late `lost()` may fire after the guard's validity ends: timer resolution and a
/// loaded machine's scheduling, nothing else (the contract's "small stated margin").
pub const LOST_MARGIN: Duration = Duration::from_millis(250);

/// The faulty backend, or the reason this case does not apply.
pub(crate) async fn faulty(
    suite: &Suite,
    case: &str,
) -> std::result::Result<Option<Faulty>, Failure> {
    if let Some(f) = suite.harness.behind_faults().await {
        return Ok(Some(f));
    }
    let backend = suite.harness.backend().await;
    ensure!(
        !backend.capabilities().cross_host,
        "a networked backend must let the harness put faults between it and its server \
         (Harness::behind_faults)"
    );
    super::report(format_args!(
        "{}: {case}: skipped, the backend has no network to fault",
        suite.name
    ));
    Ok(None)
}

/// Waits until `owner` obtains its key (another client, straight to the server), for at
/// most `within`; returns how long that took.
async fn obtained_within(
    owner: &Owner,
    within: Duration,
) -> std::result::Result<Duration, Failure> {
    let started = Instant::now();
    loop {
        match owner.obtain(ms(30_000)).await {
            Ok(ObtainOutcome::Acquired { .. }) => return Ok(started.elapsed()),
            Ok(_) => {}
            Err(e) if e.is_retry_safe() => {}
            Err(e) => return Err(e.into()),
        }
        ensure!(
            started.elapsed() < within,
            "{:?} was still held after {within:?}: a hold nobody owns outlived its ttl",
            owner.key
        );
        tokio::time::sleep(ms(20)).await;
    }
}

/// Partition during a hold, watchdog on: `lost()` fires by the end of the validity (the ttl
/// from when the last successful request was sent) plus [`LOST_MARGIN`], although the
/// watchdog's prolong never comes back; the lock is then really free for others. The
/// locker's observer hears of one loss, because the validity ran out.
pub async fn partition_during_a_hold_fires_lost_in_time(suite: &Suite) -> CaseResult {
    let Some(f) = faulty(suite, "partition_during_a_hold_fires_lost_in_time").await? else {
        return Ok(());
    };
    let ttl = ms(1_500);
    let counts = Arc::new(Counts::default());
    let locker = Locker::new(Arc::clone(&f.backend)).with_observer(counts.clone());
    let sent = Instant::now();
    let guard = match locker
        .lock("partition")
        .ttl(ttl)
        .watchdog()
        .try_obtain()
        .await?
    {
        Attempt::Obtained(g) => g,
        Attempt::Busy(b) => return Err(Failure(format!("a fresh key is busy: {b}"))),
    };
    f.faults.freeze();
    let fired = tokio::time::timeout(ttl + ms(3_000), guard.lost()).await;
    let lost_at = Instant::now();
    ensure!(
        fired.is_ok(),
        "lost() did not fire within 3 s of the validity's end"
    );
    let validity_end = sent + ttl;
    let late = lost_at.saturating_duration_since(validity_end);
    ensure!(
        late <= LOST_MARGIN,
        "lost() fired {late:?} after the validity ended (margin {LOST_MARGIN:?})"
    );
    super::report(format_args!(
        "{}: partition during a hold: lost() fired {late:?} after the validity end",
        suite.name
    ));
    let (expired, lost) = (read(&counts.expired), locker.stats().lost);
    ensure!(
        (expired, lost) == (1, 1),
        "the observer heard of {expired} expired losses and stats() counts {lost} lost, expected 1 and 1"
    );
    let other = Owner::new(&f.direct, "partition", "other");
    obtained_within(&other, ttl + ms(2_000)).await?;
    f.faults.heal();
    match guard.release().await {
        Ok(ReleaseOutcome::Lost) => {}
        Ok(other) => return Err(Failure(format!("the stale release answered {other:?}"))),
        Err(e) => ensure!(e.is_retry_safe(), "the stale release failed: {e}"),
    }
    ensure!(
        matches!(other.inspect().await?, LockState::Held { .. }),
        "the new holder keeps the lock after the heal"
    );
    Ok(())
}

/// A slow server (replies delayed by a tenth of the call's deadline): the guard never claims more
/// validity than it can have, and a grant that arrives after its ttl is given back as
/// `ExpiredOnArrival`.
pub async fn slow_server_never_overstates_validity(suite: &Suite) -> CaseResult {
    let Some(f) = faulty(suite, "slow_server_never_overstates_validity").await? else {
        return Ok(());
    };
    let locker = Locker::new(Arc::clone(&f.backend));
    // Connections are opened before the server turns slow.
    let _ = f.backend.inspect(&Key::new("slow")?).await?;
    // A tenth of the deadline: on a loaded machine a call may have to wait for a returned
    // connection (sqlx's pool sends a round trip when one comes back) or log in on a fresh
    // one (two more delayed round trips), and must still fit its deadline.
    let latency = f.deadline / 10;
    f.faults.delay_replies(latency);
    let ttl = f.deadline;
    // A slow server may also make a call run into its deadline (opening a connection takes
    // several delayed round trips): that is a retry-safe error, and the client retries.
    let mut tries = 0;
    let guard = loop {
        tries += 1;
        match locker.lock("slow").ttl(ttl).try_obtain().await {
            Ok(Attempt::Obtained(g)) => break g,
            Ok(Attempt::Busy(b)) => return Err(Failure(format!("a fresh key is busy: {b}"))),
            Err(e) if e.is_retry_safe() && tries < 10 => {}
            Err(e) => return Err(e.into()),
        }
    };
    ensure!(
        guard.remaining() <= ttl - latency,
        "the guard claims {:?} left of a {ttl:?} lock whose grant took at least {latency:?}",
        guard.remaining()
    );
    // A slow server may make the release run out of its deadline too: retry-safe, and the
    // lock then expires with its ttl.
    if let Err(e) = guard.release().await {
        ensure!(e.is_retry_safe(), "release on a slow server: {e}");
    }

    // A grant slower than its ttl (but within the call's deadline) does not count.
    let ttl = latency / 2;
    let mut tries = 0;
    loop {
        tries += 1;
        match locker.lock("slow-2").ttl(ttl).try_obtain().await {
            Err(e) if e.kind() == ErrorKind::ExpiredOnArrival => break,
            Err(e) if e.is_retry_safe() && tries < 10 => {}
            other => {
                return Err(Failure(format!(
                "a grant arriving after its ttl of {ttl:?} must be ExpiredOnArrival, got {other:?}"
            )))
            }
        }
    }
    f.faults.heal();
    let other = Owner::new(&f.direct, "slow-2", "other");
    obtained_within(&other, f.deadline + ms(2_000)).await?;
    Ok(())
}

/// A partition during an obtain, and during a release, then a heal: the calls end by their
/// deadline with a retry-safe error, and whatever the server applied late is free again
/// within one ttl; nobody ever holds the key twice.
pub async fn partition_during_obtain_or_release_leaves_no_orphan(suite: &Suite) -> CaseResult {
    let Some(f) = faulty(suite, "partition_during_obtain_or_release_leaves_no_orphan").await?
    else {
        return Ok(());
    };
    let locker = Locker::new(Arc::clone(&f.backend));
    let ttl = ms(1_000);
    let bound = f.deadline + ms(2_000);

    f.faults.freeze();
    let started = Instant::now();
    let attempt = locker.lock("split-obtain").ttl(ttl).try_obtain().await;
    ensure!(
        started.elapsed() <= bound,
        "an obtain in a partition took {:?}, past its deadline of {:?}",
        started.elapsed(),
        f.deadline
    );
    match attempt {
        Err(e) if e.is_retry_safe() => {}
        other => {
            return Err(Failure(format!(
                "an obtain in a partition must fail retry-safe, got {other:?}"
            )))
        }
    }
    f.faults.heal();
    obtained_within(
        &Owner::new(&f.direct, "split-obtain", "other"),
        ttl + ms(2_000),
    )
    .await?;

    let guard = match locker.lock("split-release").ttl(ttl).try_obtain().await? {
        Attempt::Obtained(g) => g,
        Attempt::Busy(b) => return Err(Failure(format!("a fresh key is busy: {b}"))),
    };
    f.faults.freeze();
    let started = Instant::now();
    let released = guard.release().await;
    ensure!(
        started.elapsed() <= bound,
        "a release in a partition took {:?}",
        started.elapsed()
    );
    if let Err(e) = &released {
        ensure!(e.is_retry_safe(), "a release in a partition failed: {e}");
    }
    f.faults.heal();
    obtained_within(
        &Owner::new(&f.direct, "split-release", "other"),
        ttl + ms(2_000),
    )
    .await?;
    Ok(())
}

/// Hundreds of obtains, prolongs and releases through the client layer, and as many
/// `lock_all` obtains and releases of two keys, each dropped at a random point in flight:
/// once the background cleanup has run, every key is free, never held by nobody (a key a
/// cancelled obtain left behind would stay held for the whole 30 s ttl; the case allows 5 s
/// per trial). `LOCK_CONFORMANCE_TRIALS` raises the count.
pub async fn cancelled_calls_leave_nothing_held(suite: &Suite) -> CaseResult {
    let trials: usize = std::env::var("LOCK_CONFORMANCE_TRIALS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let backend = suite.harness.backend().await;
    let locker = Locker::new(Arc::clone(&backend));
    let keys = [
        Key::new("cancelled")?,
        Key::new("cancelled-a")?,
        Key::new("cancelled-b")?,
    ];
    let mut cut_in_flight = 0;
    for trial in 0..trials {
        match cut(locker.lock("cancelled").try_obtain()).await {
            None => cut_in_flight += 1,
            Some(Ok(Attempt::Obtained(guard))) => {
                if cut(guard.prolongate(ms(30_000))).await.is_none() {
                    cut_in_flight += 1;
                }
                if cut(guard.release()).await.is_none() {
                    cut_in_flight += 1;
                }
            }
            // A call an earlier trial cut before its task ran may be applied only now; the
            // wait below sees it given back.
            Some(Ok(Attempt::Busy(_))) => {}
            Some(Err(e)) => ensure!(e.is_retry_safe(), "trial {trial}: {e}"),
        }
        // The set in the order opposite to its sorted one: a cut may land with one key
        // taken, both, or a give-back in flight.
        match cut(locker.lock_all(["cancelled-b", "cancelled-a"]).try_obtain()).await {
            None => cut_in_flight += 1,
            Some(Ok(Attempt::Obtained(set))) => {
                if cut(set.release()).await.is_none() {
                    cut_in_flight += 1;
                }
            }
            Some(Ok(Attempt::Busy(_))) => {}
            Some(Err(e)) => ensure!(e.is_retry_safe(), "trial {trial}, lock_all: {e}"),
        }
        // The cleanup runs when the backend's answer arrives: far sooner than the 30 s
        // ttl a hold left behind would keep the key.
        let started = Instant::now();
        for key in &keys {
            while !matches!(backend.inspect(key).await?, LockState::Free) {
                ensure!(
                    started.elapsed() < ms(5_000),
                    "trial {trial}: a cancelled call left {key} held by nobody"
                );
                tokio::time::sleep(ms(2)).await;
            }
        }
    }
    tokio::time::sleep(ms(500)).await;
    for key in &keys {
        ensure!(
            backend.inspect(key).await? == LockState::Free,
            "a cancelled call left {key} held by nobody after every call had ended"
        );
    }
    super::report(format_args!(
        "{}: {trials} trials, {cut_in_flight} calls cut in flight, nothing left held",
        suite.name
    ));
    Ok(())
}

/// A subscription to release notifications sent into a partition ends by the call's
/// deadline (an error or no subscription: the waiter then polls), and works again after the
/// heal.
pub async fn subscribe_in_a_partition_ends_by_its_deadline(suite: &Suite) -> CaseResult {
    let Some(f) = faulty(suite, "subscribe_in_a_partition_ends_by_its_deadline").await? else {
        return Ok(());
    };
    let key = Key::new("subscribe")?;
    f.faults.freeze();
    let started = Instant::now();
    let subscribed = f.backend.subscribe(&key).await;
    let took = started.elapsed();
    ensure!(
        took <= f.deadline + ms(2_000),
        "a subscribe in a partition took {took:?}, past its deadline of {:?}",
        f.deadline
    );
    let notifies = f.backend.capabilities().release_notification;
    match subscribed {
        Ok(None) => {}
        Err(e) => ensure!(e.is_retry_safe(), "a subscribe in a partition: {e}"),
        // A backend with server notifications must not say it subscribed when the server
        // never confirmed it. One without them may answer Some: a subscription to its own
        // process's releases, which needs no server.
        Ok(Some(_)) if notifies => {
            return Err(Failure(
                "subscribed through a frozen connection: nothing confirmed it".into(),
            ))
        }
        Ok(Some(_)) => {}
    }
    f.faults.heal();
    let again = f.backend.subscribe(&key).await?;
    ensure!(
        again.is_some() || !notifies,
        "after the heal a backend with notifications subscribes again"
    );
    Ok(())
}

/// Runs `fut` until a random cut: half the time after 1 to 4 polls (wherever a fast
/// backend's call then is), half the time after 0 to 3 ms. `None` when it was cut.
async fn cut<F: std::future::Future>(fut: F) -> Option<F::Output> {
    if fastrand::bool() {
        return tokio::time::timeout(Duration::from_micros(fastrand::u64(0..3_000)), fut)
            .await
            .ok();
    }
    let mut fut = std::pin::pin!(fut);
    for _ in 0..fastrand::usize(1..=4) {
        let poll = std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx)));
        if let std::task::Poll::Ready(out) = poll.await {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}
