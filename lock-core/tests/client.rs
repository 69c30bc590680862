//! The client layer (Locker, guards, watchdog) over the memory backend, under paused time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use test_servers::locks::{held, state};

use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::{
    async_trait, Capabilities, ObtainRequest, ProlongRequest, ReleaseSubscription,
};
use lock_core::{
    Attempt, ErrorKind, Key, LockBackend, LockState, Locker, MemoryBackend, ObtainOutcome,
    ProlongOutcome, ReleaseOutcome, Result, Retry,
};
use tokio::time::Instant;

/// Counts calls and can slow obtains down, around a real memory backend.
#[derive(Debug, Default)]
struct Spy {
    inner: MemoryBackend,
    obtains: AtomicUsize,
    prolongs: AtomicUsize,
    /// Calls of `prolongate_many` (each also counts its requests in `prolongs`).
    batches: AtomicUsize,
    obtain_delay: Duration,
    /// Blocks the thread this long in each prolong (a local file system, a backend doing
    /// blocking I/O): the call returns only when it is done, never awaiting in between.
    prolong_blocks: Duration,
    notify: bool,
    subscribes: AtomicUsize,
    /// Force-releases the key when someone subscribes to it (a release that happens
    /// between a waiter's first attempt and its subscription).
    release_on_subscribe: bool,
    /// Obtains answer a `Corrupt` error (not retry-safe).
    corrupt: bool,
}

#[async_trait]
impl Layer for Spy {
    fn inner(&self) -> &dyn LockBackend {
        &self.inner
    }

    fn name(&self) -> &'static str {
        "spy"
    }

    fn capabilities(&self) -> Capabilities {
        // Sends any number of prolongs in one round trip, as far as the watchdog knows.
        Capabilities::none()
            .release_notification(self.notify)
            .prolong_batch(1_000)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        self.obtains.fetch_add(1, Ordering::SeqCst);
        if self.corrupt {
            return Err(lock_core::Error::new(
                ErrorKind::Corrupt,
                "spy",
                lock_core::Operation::Obtain,
                "a record nobody can read",
            ));
        }
        let outcome = self.inner.obtain(req).await;
        if !self.obtain_delay.is_zero() {
            tokio::time::sleep(self.obtain_delay).await;
        }
        outcome
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        self.prolongs.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.prolong_blocks);
        self.inner.prolongate(req).await
    }

    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        lock_core::backend::prolongate_each_with(reqs, |req| self.prolongate(req)).await
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.subscribes.fetch_add(1, Ordering::SeqCst);
        if self.release_on_subscribe {
            let _ = self.inner.force_release(key).await?;
        }
        if self.notify {
            self.inner.subscribe(key).await
        } else {
            Ok(None)
        }
    }
}

fn spy(spy: Spy) -> (Arc<Layered<Spy>>, Locker) {
    let spy = Arc::new(Layered(spy));
    let locker = Locker::new(spy.clone() as Arc<dyn LockBackend>);
    (spy, locker)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn second_owner_is_busy_with_holder_and_remaining() {
    let locker = Locker::new(Arc::new(MemoryBackend::new()))
        .with_metadata("job 7")
        .unwrap();
    let guard = held(locker.lock("k")).await;
    let busy = locker
        .lock("k")
        .try_obtain()
        .await
        .unwrap()
        .into_result()
        .unwrap_err();
    assert_eq!(busy.holder.unwrap().metadata.as_deref(), Some("job 7"));
    assert_eq!(busy.remaining, Locker::DEFAULT_TTL);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn waiting_obtain_is_woken_by_release_notification() {
    let (spy, locker) = spy(Spy {
        notify: true,
        ..Spy::default()
    });
    let guard = held(locker.lock("k")).await;
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let retry = Retry::linear(secs(5)).notified();
            let got = locker
                .lock("k")
                .retry(retry)
                .wait(secs(60))
                .obtain()
                .await
                .unwrap();
            (got.obtained().is_some(), start.elapsed())
        })
    };
    tokio::time::sleep(ms(100)).await;
    let _ = guard.release().await.unwrap();
    let (got, waited) = waiter.await.unwrap();
    assert!(got);
    assert!(
        waited < ms(200),
        "woken by the release, not the 5 s poll: {waited:?}"
    );
    assert_eq!(
        spy.obtains.load(Ordering::SeqCst),
        4,
        "the holder's; the waiter's first, its second once subscribed, the one after the wake-up"
    );
    assert_eq!(spy.subscribes.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn obtaining_a_free_lock_costs_one_attempt_and_no_subscription() {
    let (spy, locker) = spy(Spy {
        notify: true,
        ..Spy::default()
    });
    let guard = locker
        .lock("k")
        .retry(Retry::default().notified())
        .wait(secs(60))
        .obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert_eq!(spy.obtains.load(Ordering::SeqCst), 1);
    assert_eq!(spy.subscribes.load(Ordering::SeqCst), 0);
    let _ = guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_release_between_the_first_attempt_and_the_subscription_is_not_missed() {
    // The holder releases while the waiter subscribes: the attempt right after the
    // subscription finds the lock free, long before the 20 s poll.
    let (spy, locker) = spy(Spy {
        notify: true,
        release_on_subscribe: true,
        ..Spy::default()
    });
    let _held = held(locker.lock("k")).await;
    let started = Instant::now();
    let got = locker
        .lock("k")
        .retry(Retry::linear(secs(20)).notified())
        .wait(secs(60))
        .obtain()
        .await
        .unwrap();
    assert!(got.obtained().is_some());
    assert!(started.elapsed() < secs(1), "{:?}", started.elapsed());
    assert_eq!(spy.subscribes.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn waiting_obtain_polls_without_notification() {
    // A backend that could notify: a strategy that does not ask for it never subscribes.
    let (spy, locker) = spy(Spy {
        notify: true,
        ..Spy::default()
    });
    let guard = held(locker.lock("k")).await;
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let retry = Retry::linear(ms(100));
            locker
                .lock("k")
                .retry(retry)
                .wait(secs(60))
                .obtain()
                .await
                .unwrap()
                .obtained()
                .is_some()
        })
    };
    tokio::time::sleep(ms(500)).await;
    let _ = guard.release().await.unwrap();
    assert!(waiter.await.unwrap());
    assert_eq!(spy.subscribes.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn an_obtain_that_may_not_wait_never_subscribes() {
    let (spy, locker) = spy(Spy {
        notify: true,
        ..Spy::default()
    });
    let _guard = held(locker.lock("k")).await;
    let busy = locker
        .lock("k")
        .wait(Duration::ZERO)
        .obtain()
        .await
        .unwrap();
    assert!(busy.is_busy());
    assert_eq!(spy.subscribes.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn an_error_that_is_not_retry_safe_ends_the_wait_at_once() {
    let (spy, locker) = spy(Spy {
        corrupt: true,
        ..Spy::default()
    });
    let started = Instant::now();
    let err = locker.lock("k").wait(secs(30)).obtain().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    assert_eq!(spy.obtains.load(Ordering::SeqCst), 1, "not retried");
    assert!(started.elapsed() < ms(1));
}

#[tokio::test(start_paused = true)]
async fn locker_debug_shows_its_settings() {
    let locker = Locker::new(Arc::new(MemoryBackend::new()))
        .with_prefix("billing:")
        .with_ttl(secs(7))
        .unwrap();
    let shown = format!("{locker:?}");
    assert!(
        shown.starts_with("Locker") && shown.contains("billing:") && shown.contains("7000ms"),
        "{shown}"
    );
}

#[tokio::test(start_paused = true)]
async fn wait_deadline_is_honoured() {
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    let _guard = held(locker.lock("k")).await;
    let start = Instant::now();
    let got = locker.lock("k").wait(secs(2)).obtain().await.unwrap();
    let waited = start.elapsed();
    assert!(got.is_busy());
    assert!(
        waited >= secs(2) && waited <= secs(2) + ms(10),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_none_and_limit_bound_the_attempts() {
    let (spy, locker) = spy(Spy::default());
    let _guard = held(locker.lock("k")).await;
    let got = locker
        .lock("k")
        .retry(Retry::none())
        .wait(secs(60))
        .obtain()
        .await
        .unwrap();
    assert!(got.is_busy());
    assert_eq!(spy.obtains.load(Ordering::SeqCst), 2);
    let got = locker
        .lock("k")
        .retry(Retry::linear(ms(10)).limit(3))
        .wait(secs(60))
        .obtain()
        .await;
    assert!(got.unwrap().is_busy());
    assert_eq!(
        spy.obtains.load(Ordering::SeqCst),
        2 + 4,
        "one try and three retries"
    );
}

#[tokio::test(start_paused = true)]
async fn dont_queue_gives_up_when_the_holder_outlasts_the_wait() {
    let (spy, locker) = spy(Spy::default());
    let _guard = held(locker.lock("k").ttl(secs(60))).await;
    let start = Instant::now();
    let got = locker
        .lock("k")
        .wait(secs(5))
        .dont_queue()
        .obtain()
        .await
        .unwrap();
    assert!(got.is_busy());
    assert_eq!(start.elapsed(), Duration::ZERO, "gave up at once");
    assert_eq!(spy.obtains.load(Ordering::SeqCst), 2);
    // A holder that will expire within the wait is worth queueing for.
    let _short = held(locker.lock("j").ttl(secs(1))).await;
    let got = locker
        .lock("j")
        .wait(secs(5))
        .dont_queue()
        .obtain()
        .await
        .unwrap();
    assert!(
        got.obtained().is_some(),
        "obtained after the 1 s holder expired"
    );
}

#[tokio::test(start_paused = true)]
async fn watchdog_prolongs_on_time_and_stops_on_release() {
    let (spy, locker) = spy(Spy::default());
    let guard = held(locker.lock("k").ttl(ms(300)).watchdog()).await;
    tokio::time::sleep(ms(1050)).await;
    assert!(
        matches!(state(&locker, "k").await, LockState::Held { .. }),
        "still held past 3 ttls"
    );
    let prolongs = spy.prolongs.load(Ordering::SeqCst);
    assert_eq!(prolongs, 10, "one prolong every 100 ms");
    assert!(!guard.is_lost());
    assert!(guard.remaining() > ms(200));
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    tokio::time::sleep(ms(1000)).await;
    assert_eq!(
        spy.prolongs.load(Ordering::SeqCst),
        prolongs,
        "watchdog stopped"
    );
}

#[tokio::test(start_paused = true)]
async fn watched_locks_renew_together_one_batch_a_period() {
    let (spy, locker) = spy(Spy::default());
    // 1,000 locks obtained over 2 s, each to be renewed every 1 s (a third of 3 s).
    let mut guards = Vec::new();
    for i in 0..1000 {
        guards.push(held(locker.lock(format!("k{i}")).ttl(secs(3)).watchdog()).await);
        tokio::time::sleep(ms(2)).await;
    }
    tokio::time::sleep(secs(2)).await;
    let (batches, prolongs) = (
        spy.batches.load(Ordering::SeqCst),
        spy.prolongs.load(Ordering::SeqCst),
    );
    tokio::time::sleep(secs(10)).await;
    assert_eq!(
        spy.batches.load(Ordering::SeqCst) - batches,
        10,
        "one batch a period once every lock is on the grid"
    );
    assert_eq!(
        spy.prolongs.load(Ordering::SeqCst) - prolongs,
        10 * 1000,
        "each lock renewed once a period"
    );
    for guard in &guards {
        assert!(!guard.is_lost());
        assert!(guard.remaining() > secs(1), "never let run low");
    }
    for guard in guards {
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
    let batches = spy.batches.load(Ordering::SeqCst);
    tokio::time::sleep(secs(5)).await;
    assert_eq!(
        spy.batches.load(Ordering::SeqCst),
        batches,
        "released locks leave the watchdog"
    );
}

/// A renewal batch of a backend that blocks its thread takes 1,000 × 2 ms = 2 s; the
/// locks' validity (1.5 s, renewed from 0.5 s on) runs out during it. The lost signal must
/// fire when it does, not when the batch is over. Real time: the blocking is on the
/// thread's clock.
#[tokio::test]
async fn a_batch_of_blocking_prolongs_does_not_hold_the_lost_signal_back() {
    let ttl = ms(1500);
    let (_, locker) = spy(Spy {
        prolong_blocks: ms(2),
        ..Spy::default()
    });
    let mut guards = Vec::new();
    for i in 0..999 {
        guards.push(held(locker.lock(format!("k{i}")).ttl(ttl).watchdog()).await);
    }
    // The last lock's validity ends at the latest `ttl` after this instant.
    let started = std::time::Instant::now();
    let last = held(locker.lock("last").ttl(ttl).watchdog()).await;
    tokio::time::timeout(secs(30), last.lost())
        .await
        .expect("the last lock's lost signal fires");
    let lost_after = started.elapsed();
    // Late by one group of calls at most (32 × 2 ms); before the fix, by the whole batch.
    assert!(
        lost_after < ttl + ms(500),
        "lost signalled {lost_after:?} after the grant, its validity ended after {ttl:?}"
    );
    drop(guards);
}

/// The watchdog's task runs on the runtime of the guard that started it; when that runtime
/// ends, the next watched guard starts a new one on its own runtime.
#[test]
fn the_watchdog_outlives_the_runtime_that_started_it() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    let first = runtime().block_on(held(locker.lock("a").ttl(secs(30)).watchdog()));
    runtime().block_on(async {
        let second = held(locker.lock("b").ttl(ms(300)).watchdog()).await;
        tokio::time::sleep(ms(1_000)).await;
        assert!(!second.is_lost(), "renewed by a watchdog on this runtime");
        assert!(matches!(state(&locker, "b").await, LockState::Held { .. }));
        drop(first);
        assert_eq!(second.release().await.unwrap(), ReleaseOutcome::Released);
    });
}

#[tokio::test(start_paused = true)]
async fn watchdog_fires_lost_when_a_prolong_answers_lost() {
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    let guard = held(locker.lock("k").ttl(ms(300)).watchdog()).await;
    let _ = locker
        .backend()
        .force_release(&Key::new("k").unwrap())
        .await
        .unwrap();
    let thief = held(locker.lock("k")).await;
    let start = Instant::now();
    guard.lost().await;
    assert!(
        start.elapsed() <= ms(100),
        "lost within one watchdog period"
    );
    assert!(guard.is_lost());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Lost);
    assert!(
        matches!(state(&locker, "k").await, LockState::Held { fencing, .. } if fencing == thief.fencing())
    );
}

#[tokio::test(start_paused = true)]
async fn lost_does_not_fire_on_release() {
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    let guard = held(locker.lock("k").watchdog()).await;
    let lost = guard.lost_token();
    let _ = guard.release().await.unwrap();
    tokio::time::sleep(secs(120)).await;
    assert!(!lost.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn dropped_guard_is_released_in_the_background() {
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    drop(
        locker
            .lock("k")
            .watchdog()
            .try_obtain()
            .await
            .unwrap()
            .obtained()
            .unwrap(),
    );
    tokio::task::yield_now().await;
    assert_eq!(state(&locker, "k").await, LockState::Free);
    assert_eq!(locker.held_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn release_all_gives_back_every_lock() {
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    let a = held(locker.lock("a")).await;
    let b = held(locker.lock("b")).await;
    let done = held(locker.lock("c")).await;
    let _ = done.release().await.unwrap();
    assert_eq!(locker.held_count(), 2);
    let mut results = locker.release_all().await;
    results.sort_by(|x, y| x.0.cmp(&y.0));
    let keys: Vec<_> = results
        .iter()
        .map(|(k, r)| (k.as_str().to_owned(), *r.as_ref().unwrap()))
        .collect();
    assert_eq!(
        keys,
        [
            ("a".into(), ReleaseOutcome::Released),
            ("b".into(), ReleaseOutcome::Released)
        ]
    );
    assert_eq!(state(&locker, "a").await, LockState::Free);
    assert_eq!(
        a.release().await.unwrap(),
        ReleaseOutcome::Lost,
        "already given back"
    );
    drop(b);
    assert_eq!(locker.held_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn grant_arriving_after_its_ttl_is_given_back() {
    let (_, locker) = spy(Spy {
        obtain_delay: ms(200),
        ..Spy::default()
    });
    let err = locker
        .lock("k")
        .ttl(ms(100))
        .try_obtain()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ExpiredOnArrival);
    assert_eq!(state(&locker, "k").await, LockState::Free);
    assert_eq!(locker.held_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn cancelled_obtain_leaves_nothing_behind() {
    let (_, locker) = spy(Spy {
        obtain_delay: ms(50),
        ..Spy::default()
    });
    let attempt = tokio::time::timeout(ms(10), locker.lock("k").try_obtain()).await;
    assert!(attempt.is_err(), "the obtain was cut off mid-flight");
    // The grant is given back once the backend's answer arrives, never before it.
    tokio::time::sleep(ms(100)).await;
    assert_eq!(state(&locker, "k").await, LockState::Free);
    assert_eq!(locker.held_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn reentry_counts_holds_and_keeps_fencing() {
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    let outer = held(locker.lock("k")).await;
    let inner = outer.reenter().await.unwrap().obtained().unwrap();
    assert_eq!(inner.fencing(), outer.fencing());
    assert!(matches!(
        state(&locker, "k").await,
        LockState::Held { holds: 2, .. }
    ));
    assert!(
        locker.lock("k").try_obtain().await.unwrap().is_busy(),
        "another handle is another owner"
    );
    assert_eq!(
        inner.release().await.unwrap(),
        ReleaseOutcome::Decremented { holds: 1 }
    );
    assert_eq!(outer.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn with_lock_runs_the_closure_and_releases() {
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    let key = locker
        .with_lock("k", |held| async move { held.key().to_string() })
        .await
        .unwrap();
    assert_eq!(key.obtained().as_deref(), Some("k"));
    assert_eq!(state(&locker, "k").await, LockState::Free);
    let _guard = held(locker.lock("k")).await;
    let busy = locker
        .clone()
        .with_wait(ms(50))
        .with_lock("k", |_| async {})
        .await
        .unwrap();
    assert!(matches!(busy, Attempt::Busy(_)));
}

#[tokio::test(start_paused = true)]
async fn with_lock_tells_the_closure_when_the_lock_is_lost() {
    let backend = Arc::new(MemoryBackend::new());
    let locker = Locker::new(backend.clone() as Arc<dyn LockBackend>)
        .with_ttl(secs(3))
        .unwrap();
    let key = Key::new("k").unwrap();
    let seen = locker
        .with_lock("k", |held| async move {
            let before = held.is_lost();
            // Broken by an operator; the watchdog's next prolong answers Lost.
            backend.force_release(&key).await.unwrap();
            tokio::select! {
                () = held.lost() => {}
                () = tokio::time::sleep(secs(10)) => panic!("lost() never fired"),
            }
            (before, held.is_lost())
        })
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert_eq!(seen, (false, true));
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_refused_before_any_io() {
    let (spy, locker) = spy(Spy::default());
    let cases = [
        locker.lock("").try_obtain().await,
        locker.lock("x".repeat(1025)).try_obtain().await,
        locker.lock("a\0b").try_obtain().await,
        locker.lock("k").ttl(Duration::ZERO).try_obtain().await,
        locker
            .lock("k")
            .ttl(secs(366 * 24 * 3600))
            .try_obtain()
            .await,
        locker
            .lock("k")
            .metadata("m".repeat(4097))
            .try_obtain()
            .await,
        locker.lock("k").watchdog_every(1.5).try_obtain().await,
        // The bounds themselves: a period of nothing, or of the whole ttl.
        locker.lock("k").watchdog_every(0.0).try_obtain().await,
        locker.lock("k").watchdog_every(1.0).try_obtain().await,
    ];
    for (i, case) in cases.into_iter().enumerate() {
        assert_eq!(
            case.unwrap_err().kind(),
            ErrorKind::InvalidInput,
            "case {i}"
        );
    }
    assert_eq!(spy.obtains.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn guard_debug_does_not_leak_the_token() {
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    let guard = held(locker.lock("k")).await;
    let shown = format!("{guard:?}");
    assert!(shown.contains("Token(") && shown.contains('…'), "{shown}");
    let builder = format!("{:?}", locker.lock("k").ttl(secs(7)).dont_queue());
    assert!(
        builder.starts_with("LockBuilder")
            && builder.contains("7000ms")
            && builder.contains("dont_queue: true"),
        "{builder}"
    );
    let lost = format!("{:?}", guard.lost());
    assert!(
        lost.starts_with("LostFuture") && lost.contains("\"k\""),
        "{lost}"
    );
    assert!(!lost.contains("Token"), "{lost}");
    assert!(!shown.contains(&"0".repeat(32)));
}

#[test]
fn lock_state_serializes_for_operators() {
    let state = LockState::Cooling {
        remaining: ms(1500),
    };
    assert_eq!(
        serde_json::to_string(&state).unwrap(),
        r#"{"state":"cooling","remaining_ms":1500}"#
    );
    let json = serde_json::to_string(&LockState::Free).unwrap();
    assert_eq!(
        serde_json::from_str::<LockState>(&json).unwrap(),
        LockState::Free
    );
}
