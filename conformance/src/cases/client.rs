//! Through the client layer: contention, many locks, waiting, cancellation, the lost
//! signal, dropped guards, a paused holder.

use super::*;
use crate::pace::Pace;

/// N tasks contend for one key for M rounds through the client layer: never two inside at
/// once, fencing strictly increasing in acquisition order, every acquisition released.
pub async fn exclusion_under_contention(suite: &Suite) -> CaseResult {
    const TASKS: usize = 16;
    const ROUNDS: usize = 5;
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend).with_retry(Retry::exponential(ms(1), ms(20)).notified());
    let inside = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (locker, inside, order) = (locker.clone(), Arc::clone(&inside), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = match locker
                    .lock("contended")
                    .ttl(LONG)
                    .wait(ms(60_000))
                    .obtain()
                    .await?
                {
                    Attempt::Obtained(g) => g,
                    Attempt::Busy(b) => return Err(Failure(format!("gave up waiting: {b}"))),
                };
                ensure!(
                    inside.fetch_add(1, Ordering::SeqCst) == 0,
                    "two holders inside at once"
                );
                order
                    .lock()
                    .map_err(|_| Failure("poisoned".into()))?
                    .push(guard.fencing());
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                let r = guard.release().await?;
                ensure!(
                    r == ReleaseOutcome::Released,
                    "release under contention: {r:?}"
                );
            }
            Ok::<(), Failure>(())
        }));
    }
    join_tasks(tasks).await?;
    let order = order
        .lock()
        .map_err(|_| Failure("poisoned".into()))?
        .clone();
    ensure!(
        order.len() == TASKS * ROUNDS,
        "{} acquisitions, expected {}",
        order.len(),
        TASKS * ROUNDS
    );
    ensure!(
        order.windows(2).all(|w| w[0] < w[1]),
        "fencing not increasing in acquisition order: {order:?}"
    );
    Ok(())
}

/// `Locker::lock_all`, all or nothing: a set with a busy key leaves none of its other keys
/// held; four tasks taking overlapping sets in opposite orders all finish (no deadlock)
/// and no key ever has two holders.
pub async fn lock_all_takes_every_key_or_none(suite: &Suite) -> CaseResult {
    const ROUNDS: usize = 5;
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend).with_retry(Retry::exponential(ms(1), ms(20)).notified());
    let b = take(&locker, "all-b", LONG, false).await?;
    let attempt = locker
        .lock_all(["all-a", "all-b", "all-c"])
        .ttl(LONG)
        .try_obtain()
        .await?;
    ensure!(attempt.is_busy(), "lock_all took a set with a held key");
    for key in ["all-a", "all-c"] {
        let other = take(&locker, key, LONG, false).await?;
        let r = other.release().await?;
        ensure!(
            r == ReleaseOutcome::Released,
            "{key} after a busy lock_all: {r:?}"
        );
    }
    let r = b.release().await?;
    ensure!(
        r == ReleaseOutcome::Released,
        "the busy key's release: {r:?}"
    );

    let inside: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    let sets: [&'static [usize]; 4] = [&[0, 1], &[1, 0], &[2, 1, 0], &[0, 2]];
    let mut tasks = Vec::new();
    for set in sets {
        let (locker, inside) = (locker.clone(), Arc::clone(&inside));
        tasks.push(tokio::spawn(async move {
            let keys: Vec<String> = set.iter().map(|i| format!("all-{i}")).collect();
            for _ in 0..ROUNDS {
                let held = match locker
                    .lock_all(&keys)
                    .ttl(LONG)
                    .wait(ms(60_000))
                    .obtain()
                    .await?
                {
                    Attempt::Obtained(held) => held,
                    Attempt::Busy(b) => return Err(Failure(format!("gave up waiting: {b}"))),
                };
                for &i in set {
                    ensure!(
                        inside[i].fetch_add(1, Ordering::SeqCst) == 0,
                        "all-{i} held by two sets at once"
                    );
                }
                tokio::task::yield_now().await;
                for &i in set {
                    inside[i].fetch_sub(1, Ordering::SeqCst);
                }
                held.release().await?;
            }
            Ok::<(), Failure>(())
        }));
    }
    tokio::time::timeout(ms(120_000), join_tasks(tasks))
        .await
        .map_err(|_| Failure("lock_all of overlapping sets did not finish in 120 s".into()))?
}

/// Leader election (`Locker::elect`): three candidates elected twice each, never two
/// leaders at once, every term above the one before; an observer (`Locker::observe`) sees
/// only terms that leaders had, in increasing order.
pub async fn leaders_never_overlap_and_terms_grow(suite: &Suite) -> CaseResult {
    const CANDIDATES: usize = 3;
    const TERMS: usize = 2;
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend).with_retry(Retry::exponential(ms(1), ms(20)).notified());
    let mut observer = locker.observe("leader")?.every(ms(10));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let observing = {
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                match observer.changed().await {
                    Ok(Some(leader)) => seen
                        .lock()
                        .map_err(|_| Failure("poisoned".into()))?
                        .push(leader.term),
                    Ok(None) => {}
                    Err(e) => return Err::<(), _>(Failure(format!("observing: {e}"))),
                }
            }
        })
    };
    let leading = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..CANDIDATES {
        let (locker, leading, terms) = (locker.clone(), Arc::clone(&leading), Arc::clone(&terms));
        tasks.push(tokio::spawn(async move {
            for _ in 0..TERMS {
                let leader = match locker
                    .elect("leader")
                    .ttl(LONG)
                    .identity(format!("candidate {i}"))
                    .wait(ms(60_000))
                    .lead()
                    .await?
                {
                    Attempt::Obtained(leader) => leader,
                    Attempt::Busy(b) => return Err(Failure(format!("never elected: {b}"))),
                };
                let ran = leader
                    .while_leading(|term| {
                        let (leading, terms) = (Arc::clone(&leading), Arc::clone(&terms));
                        async move {
                            if leading.fetch_add(1, Ordering::SeqCst) != 0 {
                                return Err(Failure("two leaders at once".into()));
                            }
                            terms
                                .lock()
                                .map_err(|_| Failure("poisoned".into()))?
                                .push(term);
                            // Long enough for the observer to see this term.
                            tokio::time::sleep(ms(40)).await;
                            leading.fetch_sub(1, Ordering::SeqCst);
                            Ok(())
                        }
                    })
                    .await;
                match ran {
                    Some(result) => result?,
                    None => return Err(Failure("a leadership was lost under contention".into())),
                }
                let r = leader.resign().await?;
                ensure!(r == ReleaseOutcome::Released, "resign: {r:?}");
            }
            Ok::<(), Failure>(())
        }));
    }
    join_tasks(tasks).await?;
    let terms = terms
        .lock()
        .map_err(|_| Failure("poisoned".into()))?
        .clone();
    ensure!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms not increasing in election order: {terms:?}"
    );
    // Every term lasted 40 ms, four times the observer's pace; on a loaded machine it may
    // still miss one, so it must see at least one, and nothing but the leaders' terms.
    tokio::time::sleep(ms(50)).await;
    observing.abort();
    // An observer that ended before the abort ended on an error.
    if let Ok(Err(failure)) = observing.await {
        return Err(failure);
    }
    let seen = seen.lock().map_err(|_| Failure("poisoned".into()))?.clone();
    ensure!(
        !seen.is_empty()
            && seen.windows(2).all(|w| w[0] < w[1])
            && seen.iter().all(|t| terms.contains(t)),
        "the observer saw {seen:?}; the leaders had {terms:?}"
    );
    Ok(())
}

/// Many locks held at once (distinct keys), then all released: no pool exhaustion, no leak.
pub async fn many_locks_held_at_once(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend);
    let mut guards = Vec::new();
    // The first lock must outlast the obtains of all the others, or release_all answers
    // ReleasedLate for it: four times LONG leaves 600 ms an obtain where the bulk cases on
    // three etcd members under a loaded CI took over 40 ms.
    let ttl = LONG * 4;
    for i in 0..200 {
        match locker
            .lock(format!("many-{i}"))
            .ttl(ttl)
            .try_obtain()
            .await?
        {
            Attempt::Obtained(g) => guards.push(g),
            Attempt::Busy(b) => return Err(Failure(format!("key many-{i} busy: {b}"))),
        }
    }
    let fencings: HashSet<_> = guards
        .iter()
        .map(|g| (g.key().clone(), g.fencing()))
        .collect();
    ensure!(fencings.len() == 200, "distinct locks");
    ensure!(locker.held_count() == 200, "registry counts 200 held");
    let released = locker.release_all().await;
    ensure!(
        released
            .iter()
            .all(|(_, r)| matches!(r, Ok(ReleaseOutcome::Released))),
        "release_all: {:?}",
        released
            .iter()
            .find(|(_, r)| !matches!(r, Ok(ReleaseOutcome::Released)))
    );
    drop(guards);
    ensure!(
        locker
            .lock("many-7")
            .try_obtain()
            .await?
            .obtained()
            .is_some(),
        "free after release_all"
    );
    Ok(())
}

/// A waiting obtain succeeds once the holder releases, and a wait on a lock that stays held
/// ends within its deadline plus a small bound.
pub async fn waiting_obtain_honours_release_and_deadline(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend);
    let holder = take(&locker, "wait", LONG, false).await?;
    let start = Instant::now();
    let got = locker.lock("wait").wait(ms(400)).obtain().await?;
    let waited = start.elapsed();
    ensure!(got.is_busy(), "a wait on a held lock must end Busy");
    ensure!(
        waited >= ms(400) && waited < ms(1_400),
        "wait of 400 ms ended after {waited:?}"
    );
    let start = Instant::now();
    let got = locker
        .lock("wait")
        .wait(ms(5_000))
        .dont_queue()
        .obtain()
        .await?;
    ensure!(
        got.is_busy() && start.elapsed() < ms(1_000),
        "dont_queue must give up at once on a 30 s holder"
    );
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock("wait").wait(ms(20_000)).obtain().await })
    };
    tokio::time::sleep(ms(200)).await;
    let _ = holder.release().await?;
    let got = waiter
        .await
        .map_err(|e| Failure(format!("waiter panicked: {e}")))??;
    ensure!(
        got.obtained().is_some(),
        "the waiter must obtain after the release"
    );
    Ok(())
}

/// Cancelling a waiting obtain (dropping its future) ends it promptly and leaves nothing:
/// after the holder releases, another owner obtains at once.
pub async fn cancelled_wait_leaves_nothing_behind(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend);
    let holder = take(&locker, "cancel", LONG, false).await?;
    let cut = tokio::time::timeout(ms(300), locker.lock("cancel").wait(ms(20_000)).obtain()).await;
    ensure!(
        cut.is_err(),
        "the wait should still be running when cancelled"
    );
    let _ = holder.release().await?;
    tokio::time::sleep(ms(100)).await;
    let got = locker.lock("cancel").try_obtain().await?;
    ensure!(
        got.obtained().is_some(),
        "a cancelled waiter left a hold behind"
    );
    Ok(())
}

/// The watchdog keeps a lock past many ttls; the lost signal does not fire on release, fires
/// within a bound when the lock is stolen, and at once for a guard already lost.
pub async fn lost_signal_fires_only_when_lost(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(Arc::clone(&backend));
    // A ttl that leaves each renewal 1 s to commit: a durable backend's commit waits for
    // the disk, which a loaded machine's other writes can hold up for hundreds of ms.
    let guard = take(&locker, "watch", ms(1_500), true).await?;
    tokio::time::sleep(ms(3_500)).await;
    ensure!(!guard.is_lost(), "the watchdog let the lock go");
    ensure!(
        locker.lock("watch").try_obtain().await?.is_busy(),
        "held past 2 ttls by the watchdog"
    );
    let lost = guard.lost_token();
    let _ = guard.release().await?;
    tokio::time::sleep(ms(700)).await;
    ensure!(!lost.is_cancelled(), "lost fired on a normal release");

    let guard = take(&locker, "watch", ms(600), true).await?;
    let _ = backend.force_release(guard.key()).await?;
    let _thief = take(&locker, "watch", LONG, false).await?;
    let start = Instant::now();
    tokio::time::timeout(ms(2_000), guard.lost())
        .await
        .map_err(|_| Failure("lost did not fire within 2 s of a steal".into()))?;
    ensure!(start.elapsed() < ms(2_000), "lost fired late");
    tokio::time::timeout(ms(50), guard.lost())
        .await
        .map_err(|_| Failure("lost must resolve at once when already lost".into()))?;
    Ok(())
}

/// A guard dropped without release does not hold the lock for ever.
pub async fn dropped_guard_does_not_hold_forever(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend);
    drop(
        locker
            .lock("dropped")
            .ttl(LONG)
            .watchdog()
            .try_obtain()
            .await?
            .obtained(),
    );
    let got = locker.lock("dropped").wait(ms(5_000)).obtain().await?;
    ensure!(
        got.obtained().is_some(),
        "a dropped guard still holds the lock after 5 s"
    );
    Ok(())
}

/// A holder paused longer than its ttl: another owner takes the lock with a higher fencing
/// token, the old holder's prolong and release are Lost, its lost signal fires, and a
/// resource that remembers the highest token refuses its stale write.
pub async fn paused_holder_is_fenced_out(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let t = Pace::of(&*backend, "paused_holder_is_fenced_out");
    let locker = Locker::new(backend);
    // The resource checks tokens with the fence's one rule (`lock_core::fence`).
    let fence = lock_core::fence::MemoryFence::new();
    let stale = take(&locker, "paused", t.ms(300), false).await?;
    fence.write("paused", stale.fencing(), || ())?;
    tokio::time::sleep(t.ms(500)).await;
    let fresh = take(&locker, "paused", LONG, false).await?;
    let wrote = fence.write("paused", fresh.fencing(), || ());
    ensure!(wrote.is_ok(), "the new holder's write: {wrote:?}");
    // The paused holder resumes and writes: refused, naming both tokens.
    let refused = fence.write("paused", stale.fencing(), || ());
    ensure!(
        refused
            .as_ref()
            .err()
            .and_then(|e| e.stale_token())
            .is_some_and(|t| t.presented == stale.fencing() && t.highest == fresh.fencing()),
        "the stale holder's write must be refused (tokens {} then {}): {refused:?}",
        stale.fencing(),
        fresh.fencing()
    );
    let p = stale.prolongate(LONG).await?;
    ensure!(
        p == ProlongOutcome::Lost,
        "stale prolong: expected Lost, got {p:?}"
    );
    ensure!(stale.is_lost(), "lost must fire after a Lost prolong");
    ensure!(
        stale.release().await? == ReleaseOutcome::Lost,
        "stale release must be Lost"
    );
    ensure!(
        fresh.release().await? == ReleaseOutcome::Released,
        "the new holder is untouched"
    );
    Ok(())
}
