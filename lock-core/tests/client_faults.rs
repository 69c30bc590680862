//! The client layer on a bad day: replies lost after the backend applied a call, calls that
//! never return, futures dropped mid-flight, waits that overflow. Memory backend underneath,
//! time paused, so every timing here is exact.

use std::future::{pending, Future};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use test_servers::locks::{held, state};

use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::{
    async_trait, Capabilities, ObtainRequest, ProlongRequest, ReleaseRequest,
};
use lock_core::{
    Error, ErrorKind, Key, LockBackend, LockState, Locker, MemoryBackend, ObtainOutcome, Operation,
    ProlongOutcome, ReleaseOutcome, Result, Retry,
};
use tokio::time::Instant;

/// A memory backend behind a misbehaving network.
#[derive(Debug, Default)]
struct Faulty {
    inner: Arc<MemoryBackend>,
    /// The first obtain is applied, but its reply is lost (an `Unavailable` error instead).
    lose_first_obtain_reply: AtomicBool,
    /// Obtains of this key are applied, and their reply is lost, while this is set.
    lose_obtain_replies_of: std::sync::Mutex<Option<&'static str>>,
    /// Obtains travel this long before the server applies them; dropping the caller does
    /// not stop them (like a statement already sent to Postgres).
    obtain_in_flight: Duration,
    /// Releases wait this long on the client side before they are sent (a busy connection
    /// pool, say): dropping the caller before then means the release is never sent.
    release_in_flight: Duration,
    /// Prolongs never come back.
    prolong_hangs: bool,
    /// Prolongs take this long.
    prolong_in_flight: Duration,
    /// Prolongs of this key take this long more.
    slow_prolong: Option<(&'static str, Duration)>,
    /// Prolongs asking for less than this are applied at once, and their reply is lost.
    lose_short_prolong_replies: Duration,
    /// Prolongs panic (a user's backend with a bug).
    prolong_panics: bool,
    /// Prolongs of this key fail (`Unavailable`) this many times, then work.
    prolong_fails: Option<(&'static str, usize)>,
    prolong_failures: AtomicUsize,
    releases: AtomicUsize,
}

#[async_trait]
impl Layer for Faulty {
    fn inner(&self) -> &dyn LockBackend {
        &*self.inner
    }

    fn name(&self) -> &'static str {
        "faulty"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let (inner, delay) = (Arc::clone(&self.inner), self.obtain_in_flight);
        let (key, token, ttl, holder) = (req.key.clone(), *req.token, req.ttl, req.holder.clone());
        let applied = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let req = ObtainRequest::new(&key, &token, ttl, &holder);
            inner.obtain(req).await
        });
        let outcome = applied.await.expect("the server task ran")?;
        let lost_key = *self.lose_obtain_replies_of.lock().unwrap();
        if self.lose_first_obtain_reply.swap(false, Ordering::SeqCst)
            || lost_key == Some(req.key.as_str())
        {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "faulty",
                Operation::Obtain,
                "the reply was lost",
            ));
        }
        Ok(outcome)
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        if self.prolong_hangs {
            pending::<()>().await;
        }
        assert!(!self.prolong_panics, "a backend bug: prolongate panicked");
        if req.ttl.as_duration() < self.lose_short_prolong_replies {
            let _ = self.inner.prolongate(req).await;
            return Err(Error::new(
                ErrorKind::Unavailable,
                "faulty",
                Operation::Prolongate,
                "the reply was lost",
            ));
        }
        tokio::time::sleep(self.prolong_in_flight).await;
        if let Some((key, slow)) = self.slow_prolong {
            if req.key.as_str() == key {
                tokio::time::sleep(slow).await;
            }
        }
        if let Some((key, times)) = self.prolong_fails {
            if req.key.as_str() == key
                && self.prolong_failures.fetch_add(1, Ordering::SeqCst) < times
            {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    "faulty",
                    Operation::Prolongate,
                    "connection reset",
                ));
            }
        }
        self.inner.prolongate(req).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        // Queued on the client side: a dropped caller means it is never sent.
        tokio::time::sleep(self.release_in_flight).await;
        self.inner.release(req).await
    }
}

fn locker(faulty: Faulty) -> (Arc<Layered<Faulty>>, Locker) {
    let faulty = Arc::new(Layered(faulty));
    (
        Arc::clone(&faulty),
        Locker::new(faulty as Arc<dyn LockBackend>),
    )
}

/// A runtime of its own, for the tests whose guards outlive the runtime that made them.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn waits_that_overflow_an_instant_do_not_panic() {
    let (_, locker) = locker(Faulty::default());
    let locker = locker.with_wait(Duration::MAX);
    let guard = locker.lock("k").obtain().await.unwrap().obtained().unwrap();
    let busy = locker
        .lock("k")
        .wait(Duration::MAX)
        .retry(Retry::none())
        .obtain()
        .await
        .unwrap();
    assert!(busy.is_busy());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

/// An obtain whose reply is lost after the backend applied it, with no wait left to retry
/// in: the error comes back at once, and the grant it may have made is given back in the
/// background, so the key is free for the caller's own retry (nobody has the token that
/// holds it).
#[tokio::test(start_paused = true)]
async fn a_failed_obtain_gives_back_the_grant_its_lost_reply_made() {
    let (faulty, locker) = locker(Faulty::default());
    *faulty.lose_obtain_replies_of.lock().unwrap() = Some("k");
    let e = locker.lock("k").try_obtain().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(lock_core::settle(Duration::from_secs(1)).await);
    assert_eq!(state(&locker, "k").await, LockState::Free, "try_obtain");
    let e = locker
        .lock("k")
        .wait(ms(100))
        .retry(Retry::linear(ms(10)))
        .obtain()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(lock_core::settle(Duration::from_secs(1)).await);
    assert_eq!(state(&locker, "k").await, LockState::Free, "obtain");
    *faulty.lose_obtain_replies_of.lock().unwrap() = None;
    let guard = held(locker.lock("k")).await;
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

/// `lock_all` whose obtain of one key is applied but its reply lost: the error comes back
/// with none of the keys held, that one included, and the caller's retry takes them all.
#[tokio::test(start_paused = true)]
async fn lock_all_with_a_lost_reply_leaves_none_of_the_keys_held() {
    for lost in ["a", "b", "c"] {
        let (faulty, locker) = locker(Faulty::default());
        *faulty.lose_obtain_replies_of.lock().unwrap() = Some(lost);
        let e = locker
            .lock_all(["a", "b", "c"])
            .try_obtain()
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{lost}");
        assert!(lock_core::settle(Duration::from_secs(1)).await);
        for key in ["a", "b", "c"] {
            assert_eq!(
                state(&locker, key).await,
                LockState::Free,
                "{key}, after the reply of {lost} was lost"
            );
        }
        *faulty.lose_obtain_replies_of.lock().unwrap() = None;
        let all = locker
            .lock_all(["a", "b", "c"])
            .try_obtain()
            .await
            .unwrap()
            .obtained()
            .unwrap_or_else(|| panic!("the retry after {lost}'s lost reply is busy"));
        assert!(all.release().await.is_ok());
    }
}

#[tokio::test(start_paused = true)]
async fn obtain_retried_after_a_lost_reply_holds_exactly_once() {
    let (_, locker) = locker(Faulty {
        lose_first_obtain_reply: AtomicBool::new(true),
        ..Faulty::default()
    });
    let guard = locker
        .lock("k")
        .wait(Duration::from_secs(1))
        .retry(Retry::linear(ms(10)))
        .obtain()
        .await
        .expect("the retry must turn the server's grant into ours")
        .obtained()
        .expect("obtained");
    let LockState::Held { holds, fencing, .. } = state(&locker, "k").await else {
        panic!("held")
    };
    assert_eq!(holds, 1, "the retry asked for one hold");
    assert_eq!(fencing, guard.fencing());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(state(&locker, "k").await, LockState::Free);
}

#[tokio::test(start_paused = true)]
async fn obtain_dropped_while_in_flight_leaves_nothing_held() {
    let (_, locker) = locker(Faulty {
        obtain_in_flight: ms(20),
        ..Faulty::default()
    });
    for cut_at in [0, 1, 5, 19, 20, 21] {
        let attempt = tokio::time::timeout(ms(cut_at), locker.lock("k").try_obtain()).await;
        if let Ok(Ok(attempt)) = attempt {
            assert_eq!(
                attempt.obtained().unwrap().release().await.unwrap(),
                ReleaseOutcome::Released
            );
        }
        // Long enough for the server to apply the obtain and the client to clean up, far
        // shorter than the ttl.
        tokio::time::sleep(ms(100)).await;
        assert_eq!(
            state(&locker, "k").await,
            LockState::Free,
            "cut at {cut_at} ms"
        );
    }
    assert_eq!(locker.held_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn release_dropped_while_in_flight_still_releases() {
    let (_, locker) = locker(Faulty {
        release_in_flight: ms(20),
        ..Faulty::default()
    });
    let guard = held(locker.lock("k")).await;
    let cut = tokio::time::timeout(ms(5), guard.release()).await;
    assert!(cut.is_err(), "the release was cut off mid-flight");
    tokio::time::sleep(ms(100)).await;
    assert_eq!(state(&locker, "k").await, LockState::Free);
}

#[tokio::test(start_paused = true)]
async fn reenter_after_expiry_detaches_the_parent() {
    let (faulty, locker) = locker(Faulty::default());
    let parent = held(locker.lock("k").ttl(ms(100))).await;
    tokio::time::sleep(ms(150)).await;
    let child = parent.reenter().await.unwrap().obtained().unwrap();
    assert!(child.fencing() > parent.fencing(), "a fresh acquisition");
    assert!(
        parent.is_lost(),
        "the parent's hold expired and no longer counts"
    );
    let releases = faulty.releases.load(Ordering::SeqCst);
    assert_eq!(parent.release().await.unwrap(), ReleaseOutcome::Lost);
    assert_eq!(
        faulty.releases.load(Ordering::SeqCst),
        releases,
        "the parent's release must not reach the backend: it would free the child's lock"
    );
    assert!(matches!(
        state(&locker, "k").await,
        LockState::Held { holds: 1, .. }
    ));
    assert_eq!(child.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn lost_fires_at_the_validity_end_while_a_prolong_hangs() {
    let (_, locker) = locker(Faulty {
        prolong_hangs: true,
        ..Faulty::default()
    });
    let sent = Instant::now();
    let guard = held(locker.lock("k").ttl(ms(3000)).watchdog()).await;
    tokio::time::timeout(ms(3001), guard.lost())
        .await
        .expect("lost() must fire by the end of the validity, not wait for the prolong");
    assert!(sent.elapsed() >= ms(3000), "not before the validity ends");
    assert!(guard.is_lost());
}

#[tokio::test(start_paused = true)]
async fn lost_fires_at_the_validity_end_without_a_watchdog() {
    let (_, locker) = locker(Faulty::default());
    let guard = held(locker.lock("k").ttl(ms(2000))).await;
    let token = guard.lost_token();
    let started = Instant::now();
    tokio::time::timeout(ms(2001), token.cancelled())
        .await
        .expect("an unprolonged guard is lost when its ttl runs out");
    assert!(started.elapsed() >= ms(1999));
}

#[tokio::test(start_paused = true)]
async fn prolonging_in_time_keeps_the_lost_signal_quiet() {
    let (_, locker) = locker(Faulty::default());
    let guard = held(locker.lock("k").ttl(ms(1000))).await;
    let token = guard.lost_token();
    for _ in 0..5 {
        tokio::time::sleep(ms(600)).await;
        assert_eq!(
            guard.prolongate(ms(1000)).await.unwrap(),
            ProlongOutcome::Prolonged
        );
    }
    assert!(!token.is_cancelled() && !guard.is_lost());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    tokio::time::sleep(ms(5000)).await;
    assert!(!token.is_cancelled(), "a released guard is not lost");
}

#[tokio::test(start_paused = true)]
async fn obtain_dropped_after_its_answer_arrived_but_before_it_was_read_leaves_nothing() {
    let (_, locker) = locker(Faulty::default());
    {
        let obtain = locker.lock("k").try_obtain();
        let mut obtain = std::pin::pin!(obtain);
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(obtain.as_mut().poll(cx)));
        assert!(first.await.is_pending(), "the obtain runs in its own task");
        // Let that task finish and hand its grant over; then drop the obtain unread.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }
    tokio::time::sleep(ms(100)).await;
    assert_eq!(state(&locker, "k").await, LockState::Free);
}

#[tokio::test(start_paused = true)]
async fn release_all_cut_off_mid_way_still_releases_everything() {
    let (_, locker) = locker(Faulty {
        release_in_flight: ms(20),
        ..Faulty::default()
    });
    for key in ["a", "b", "c"] {
        std::mem::forget(
            locker
                .lock(key)
                .try_obtain()
                .await
                .unwrap()
                .obtained()
                .unwrap(),
        );
    }
    assert!(
        tokio::time::timeout(ms(5), locker.release_all())
            .await
            .is_err(),
        "cut off during the first release"
    );
    tokio::time::sleep(ms(200)).await;
    for key in ["a", "b", "c"] {
        let state = locker
            .backend()
            .inspect(&Key::new(key).unwrap())
            .await
            .unwrap();
        assert_eq!(state, LockState::Free, "{key}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_lock_whose_renewal_fails_is_retried_alone_and_the_batch_goes_on() {
    let (faulty, locker) = locker(Faulty {
        prolong_fails: Some(("flaky", 3)),
        ..Faulty::default()
    });
    let steady = held(locker.lock("steady").ttl(ms(1_000)).watchdog()).await;
    let flaky = held(locker.lock("flaky").ttl(ms(1_000)).watchdog()).await;
    // Renewals every 333 ms; the flaky lock's first three fail and are retried 100 ms
    // apart, well inside its validity.
    tokio::time::sleep(ms(3_000)).await;
    assert_eq!(faulty.prolong_failures.load(Ordering::SeqCst), 3 + 8);
    assert!(!steady.is_lost() && !flaky.is_lost());
    assert!(
        flaky.remaining() > ms(500),
        "back on its period once it worked"
    );

    // A lock whose every renewal fails is lost when its validity ends, not before, and
    // takes nobody with it.
    let (faulty, locker) = locker_with_failing("doomed");
    let steady = held(locker.lock("steady").ttl(ms(1_000)).watchdog()).await;
    let doomed = held(locker.lock("doomed").ttl(ms(1_000)).watchdog()).await;
    let started = Instant::now();
    doomed.lost().await;
    assert!(started.elapsed() >= ms(999) && started.elapsed() <= ms(1_001));
    tokio::time::sleep(ms(2_000)).await;
    assert!(!steady.is_lost());
    assert!(faulty.prolong_failures.load(Ordering::SeqCst) >= 7);
}

/// One slow renewal among many (a lock whose call waits behind a slow connection) must not
/// hold back the answers of the others: before, the watchdog sent them all in one
/// `prolongate_many`, whose default sends 32 at a time, one group after the other, and
/// answers when all are back: every lock of the batch heard `lost()` at its validity end.
#[tokio::test(start_paused = true)]
async fn a_slow_renewal_holds_back_no_other_lock() {
    let (_faulty, locker) = locker(Faulty {
        slow_prolong: Some(("slow", ms(5_000))),
        ..Faulty::default()
    });
    let slow = held(locker.lock("slow").ttl(ms(1_000)).watchdog()).await;
    let mut others = Vec::new();
    for i in 0..40 {
        others.push(held(locker.lock(format!("lock-{i}")).ttl(ms(1_000)).watchdog()).await);
    }
    tokio::time::sleep(ms(3_000)).await;
    assert!(slow.is_lost(), "its renewal came back after its validity");
    let lost: Vec<_> = others
        .iter()
        .filter(|g| g.is_lost())
        .map(|g| g.key().as_str().to_owned())
        .collect();
    assert!(lost.is_empty(), "lost with the slow one: {lost:?}");
}

fn locker_with_failing(key: &'static str) -> (Arc<Layered<Faulty>>, Locker) {
    locker(Faulty {
        prolong_fails: Some((key, usize::MAX)),
        ..Faulty::default()
    })
}

/// Another process: a locker of its own over the same backend.
fn other(faulty: &Arc<Layered<Faulty>>) -> Locker {
    Locker::new(Arc::clone(faulty) as Arc<dyn LockBackend>)
}

#[tokio::test(start_paused = true)]
async fn a_shorter_prolong_shortens_the_validity_and_the_lost_signal() {
    let (faulty, locker) = locker(Faulty::default());
    let guard = held(locker.lock("k").ttl(ms(10_000))).await;
    let lost = guard.lost_token();
    assert_eq!(
        guard.prolongate(ms(100)).await.unwrap(),
        ProlongOutcome::Prolonged
    );
    assert!(guard.remaining() <= ms(100), "{:?}", guard.remaining());
    tokio::time::sleep(ms(101)).await;
    assert!(
        lost.is_cancelled(),
        "lost() must fire when the shorter lease ends"
    );
    tokio::time::sleep(ms(100)).await;
    let taken = other(&faulty).lock("k").try_obtain().await.unwrap();
    assert!(!taken.is_busy(), "the backend let the lock go after 100 ms");
    assert!(guard.is_lost() && guard.remaining().is_zero());
}

#[tokio::test(start_paused = true)]
async fn a_shorter_prolong_of_a_watched_guard_renews_on_the_shorter_period() {
    let (faulty, locker) = locker(Faulty::default());
    let guard = held(locker.lock("k").ttl(ms(10_000)).watchdog()).await;
    let lost = guard.lost_token();
    assert_eq!(
        guard.prolongate(ms(100)).await.unwrap(),
        ProlongOutcome::Prolonged
    );
    tokio::time::sleep(ms(1_000)).await;
    let busy = other(&faulty).lock("k").try_obtain().await.unwrap();
    assert!(
        busy.is_busy(),
        "the watchdog keeps the shorter lease renewed"
    );
    assert!(!lost.is_cancelled() && !guard.is_lost());
    assert!(guard.remaining() <= ms(100), "{:?}", guard.remaining());
}

#[tokio::test(start_paused = true)]
async fn a_failed_prolong_may_have_shortened_the_lease() {
    let (_, locker) = locker(Faulty {
        prolong_fails: Some(("k", 1)),
        ..Faulty::default()
    });
    let guard = held(locker.lock("k").ttl(ms(10_000))).await;
    assert!(guard.prolongate(ms(100)).await.is_err());
    assert!(
        guard.remaining() <= ms(100),
        "the failed prolong may have been applied: {:?}",
        guard.remaining()
    );
}

#[tokio::test(start_paused = true)]
async fn reenter_after_expiry_detaches_every_guard_of_the_old_hold() {
    let (faulty, locker) = locker(Faulty::default());
    let parent = held(locker.lock("k").ttl(ms(100))).await;
    let first = parent.reenter().await.unwrap().obtained().unwrap();
    tokio::time::sleep(ms(150)).await;
    let fresh = first.reenter().await.unwrap().obtained().unwrap();
    assert!(fresh.fencing() > parent.fencing(), "a fresh acquisition");
    assert!(parent.is_lost() && first.is_lost());
    let releases = faulty.releases.load(Ordering::SeqCst);
    assert_eq!(parent.release().await.unwrap(), ReleaseOutcome::Lost);
    drop(first);
    tokio::time::sleep(ms(10)).await;
    assert_eq!(
        faulty.releases.load(Ordering::SeqCst),
        releases,
        "no guard of the old hold may release: it would free the fresh acquisition"
    );
    assert!(other(&faulty)
        .lock("k")
        .try_obtain()
        .await
        .unwrap()
        .is_busy());
    assert!(!fresh.is_lost());
    assert_eq!(fresh.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn reenter_answered_busy_means_the_lock_is_lost() {
    let (faulty, locker) = locker(Faulty::default());
    let guard = held(locker.lock("k").ttl(ms(10_000))).await;
    let key = Key::new("k").unwrap();
    faulty.force_release(&key).await.unwrap();
    let _thief = held(other(&faulty).lock("k")).await;
    assert!(guard.reenter().await.unwrap().is_busy());
    assert!(guard.is_lost(), "another token holds the key");
}

#[tokio::test(start_paused = true)]
async fn a_reentrant_child_of_a_watched_guard_is_renewed_with_it() {
    let (_, locker) = locker(Faulty::default());
    let parent = held(locker.lock("k").ttl(ms(300)).watchdog()).await;
    let child = parent.reenter().await.unwrap().obtained().unwrap();
    let lost = child.lost_token();
    tokio::time::sleep(ms(2_000)).await;
    assert!(!lost.is_cancelled() && !child.is_lost() && !parent.is_lost());
    // The parent goes; the child keeps the watchdog.
    assert!(matches!(
        parent.release().await.unwrap(),
        ReleaseOutcome::Decremented { holds: 1 }
    ));
    tokio::time::sleep(ms(2_000)).await;
    assert!(!lost.is_cancelled() && !child.is_lost());
    assert_eq!(child.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(state(&locker, "k").await, LockState::Free);
    assert_eq!(locker.held_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_backend_that_panics_in_prolong_still_gets_its_lost_signal_on_time() {
    let (_, locker) = locker(Faulty {
        prolong_panics: true,
        ..Faulty::default()
    });
    let started = Instant::now();
    let guard = held(locker.lock("k").ttl(ms(1_000)).watchdog()).await;
    tokio::time::timeout(ms(1_001), guard.lost())
        .await
        .expect("lost() fires at the validity's end although every renewal panicked");
    assert!(started.elapsed() >= ms(1_000));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_guard_never_takes_the_next_guard_out_of_the_registry() {
    // The memory backend answers without yielding: nothing else runs between the drop of
    // `a` and the obtain of `b`.
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    let first = held(locker.lock("a")).await;
    drop(first);
    // The background release of `a` has not run yet; `b` takes the slot `a` had.
    let second = held(locker.lock("b")).await;
    tokio::time::sleep(ms(50)).await;
    assert_eq!(locker.held_count(), 1, "b is still held");
    let released: Vec<_> = locker.release_all().await;
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].0.as_str(), "b");
    assert_eq!(state(&locker, "b").await, LockState::Free);
    drop(second);
}

#[test]
fn lost_outside_a_runtime_does_not_panic_and_keeps_time_in_one() {
    let runtime = runtime();
    let (_, locker) = locker(Faulty::default());
    let guard = runtime.block_on(held(locker.lock("k").ttl(ms(200))));
    let token = guard.lost_token();
    let lost = guard.lost();
    let fired = runtime.block_on(async { tokio::time::timeout(ms(2_000), lost).await });
    assert!(fired.is_ok(), "lost() made outside the runtime fires in it");
    assert!(token.is_cancelled() && guard.is_lost());
}

#[test]
fn a_watched_guard_whose_runtime_ended_mid_batch_still_hears_lost_on_the_next() {
    let (_, locker) = locker(Faulty {
        prolong_hangs: true,
        ..Faulty::default()
    });
    let first = runtime();
    let guard = first.block_on(async {
        let guard = held(locker.lock("k").ttl(ms(300)).watchdog()).await;
        // The first renewal (at most a third of the ttl in) is in flight, and hangs.
        tokio::time::sleep(ms(150)).await;
        guard
    });
    drop(first);
    let second = runtime();
    let fired = second.block_on(async { tokio::time::timeout(ms(3_000), guard.lost()).await });
    assert!(
        fired.is_ok(),
        "lost() must fire on the runtime the guard is used on"
    );
    assert!(guard.is_lost());
}

#[tokio::test(start_paused = true)]
async fn a_reenter_cut_off_in_flight_gives_back_its_own_hold_only() {
    let (faulty, locker) = locker(Faulty {
        obtain_in_flight: ms(50),
        ..Faulty::default()
    });
    let parent = held(locker.lock("k").ttl(ms(1_000)).watchdog()).await;
    let lost = parent.lost_token();
    let cut = tokio::time::timeout(ms(10), parent.reenter()).await;
    assert!(cut.is_err(), "cut off while its obtain was in flight");
    // The obtain lands (a second hold), and its grant is given back: one hold, no more.
    tokio::time::sleep(ms(200)).await;
    assert!(
        matches!(state(&locker, "k").await, LockState::Held { holds: 1, .. }),
        "{:?}",
        state(&locker, "k").await
    );
    assert!(!parent.is_lost());
    assert_eq!(locker.held_count(), 1);
    // The cut-off reenter left no guard behind: once the parent goes, the watchdog stops
    // and nothing holds the lock.
    assert_eq!(parent.release().await.unwrap(), ReleaseOutcome::Released);
    tokio::time::sleep(ms(3_000)).await;
    assert_eq!(state(&locker, "k").await, LockState::Free);
    assert!(
        !lost.is_cancelled(),
        "the released hold was renewed, and heard Lost"
    );
    assert!(other(&faulty)
        .lock("k")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .is_some());
}

#[test]
fn a_watched_guard_used_on_a_new_runtime_is_renewed_again() {
    let (_, locker) = locker(Faulty {
        prolong_in_flight: ms(100),
        ..Faulty::default()
    });
    let first = runtime();
    let guard = first.block_on(async {
        let guard = held(locker.lock("k").ttl(ms(600)).watchdog()).await;
        tokio::time::sleep(ms(250)).await;
        guard
    });
    drop(first);
    let second = runtime();
    second.block_on(async {
        // Any use of the guard on this runtime starts its watchdog again.
        let lost = guard.lost_token();
        tokio::time::sleep(ms(2_000)).await;
        assert!(
            !lost.is_cancelled() && !guard.is_lost(),
            "the watchdog never came back: the lock ran out"
        );
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    });
}

#[tokio::test(start_paused = true)]
async fn a_release_while_a_renewal_is_in_flight_never_fires_lost() {
    let (_, locker) = locker(Faulty {
        prolong_in_flight: ms(100),
        ..Faulty::default()
    });
    let guard = held(locker.lock("k").ttl(ms(300)).watchdog()).await;
    let lost = guard.lost_token();
    // The first renewal goes out within 100 ms and is answered 100 ms later.
    tokio::time::sleep(ms(120)).await;
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    tokio::time::sleep(ms(2_000)).await;
    assert!(!lost.is_cancelled(), "lost() fired after a normal release");
}

#[tokio::test(start_paused = true)]
async fn a_prolong_cut_off_in_flight_may_have_shortened_the_lease() {
    let (_, locker) = locker(Faulty {
        prolong_in_flight: ms(50),
        ..Faulty::default()
    });
    let guard = held(locker.lock("k").ttl(ms(10_000))).await;
    let cut = tokio::time::timeout(ms(10), guard.prolongate(ms(100))).await;
    assert!(cut.is_err(), "cut off in flight");
    assert!(guard.remaining() <= ms(100), "{:?}", guard.remaining());
}

#[tokio::test(start_paused = true)]
async fn a_failed_prolong_bounds_the_validity_while_another_is_in_flight() {
    let (_, locker) = locker(Faulty {
        prolong_in_flight: ms(50),
        lose_short_prolong_replies: ms(200),
        ..Faulty::default()
    });
    let guard = Arc::new(held(locker.lock("k").ttl(ms(10_000))).await);
    let long = {
        let guard = Arc::clone(&guard);
        tokio::spawn(async move { guard.prolongate(ms(10_000)).await })
    };
    tokio::time::sleep(ms(10)).await;
    // Applied at once, reply lost, while the long one is still on its way.
    assert!(guard.prolongate(ms(100)).await.is_err());
    assert!(
        guard.remaining() <= ms(100),
        "the short prolong may be the one that stands: {:?}",
        guard.remaining()
    );
    assert_eq!(long.await.unwrap().unwrap(), ProlongOutcome::Prolonged);
    assert!(guard.remaining() <= ms(100), "{:?}", guard.remaining());
}

#[tokio::test(start_paused = true)]
async fn is_lost_counts_a_validity_that_ran_out_with_nobody_listening() {
    let (_, locker) = locker(Faulty::default());
    let guard = held(locker.lock("k").ttl(ms(100))).await;
    assert!(!guard.is_lost());
    tokio::time::sleep(ms(150)).await;
    assert!(guard.is_lost());
}

#[test]
fn the_expiry_timer_starts_again_on_a_new_runtime() {
    let (_, locker) = locker(Faulty::default());
    let first = runtime();
    let guard = first.block_on(async {
        let guard = held(locker.lock("k").ttl(ms(300))).await;
        // Its timer starts on this runtime, and ends with it.
        let _ = guard.lost_token();
        guard
    });
    drop(first);
    let second = runtime();
    let fired = second.block_on(async { tokio::time::timeout(ms(3_000), guard.lost()).await });
    assert!(fired.is_ok(), "lost() never fired on the second runtime");
}

/// A campaign whose obtain is applied but its reply lost: within its wait it retries and
/// leads with exactly one hold; with no wait left it fails, and leaves no leadership held
/// under a token nobody has (the next candidate is elected at once).
#[tokio::test(start_paused = true)]
async fn a_campaign_with_a_lost_reply_leads_once_or_leaves_nothing() {
    let (faulty, locker) = locker(Faulty {
        lose_first_obtain_reply: AtomicBool::new(true),
        ..Faulty::default()
    });
    let leader = locker
        .elect("k")
        .wait(Duration::from_secs(1))
        .retry(Retry::linear(ms(10)))
        .lead()
        .await
        .expect("the retry turns the lost grant into the leadership")
        .obtained()
        .expect("elected");
    let LockState::Held { holds, fencing, .. } = state(&locker, "k").await else {
        panic!("held")
    };
    assert_eq!((holds, fencing), (1, leader.term()));
    assert_eq!(leader.resign().await.unwrap(), ReleaseOutcome::Released);

    *faulty.lose_obtain_replies_of.lock().unwrap() = Some("k");
    let e = locker
        .elect("k")
        .wait(ms(50))
        .retry(Retry::linear(ms(10)))
        .lead()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(lock_core::settle(Duration::from_secs(1)).await);
    assert_eq!(state(&locker, "k").await, LockState::Free);
    *faulty.lose_obtain_replies_of.lock().unwrap() = None;
    let next = locker
        .elect("k")
        .wait(ms(0))
        .lead()
        .await
        .unwrap()
        .obtained()
        .expect("the next candidate is elected at once");
    assert_eq!(next.resign().await.unwrap(), ReleaseOutcome::Released);
}
