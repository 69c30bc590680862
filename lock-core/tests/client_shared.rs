//! Semaphores and reader-writer locks through the client layer (Locker::semaphore, read,
//! write), over the memory backend, under paused time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::{
    async_trait, Capabilities, ObtainRequest, ReleaseRequest, ReleaseSubscription,
};
use lock_core::{
    Attempt, BusyReason, ErrorKind, Key, LockBackend, LockState, Locker, MemoryBackend, Mode,
    ObtainOutcome, ReleaseOutcome, Result, Retry,
};

/// The memory backend counting obtains and releases; `shared: false` makes it a backend
/// that keeps exclusive locks only.
#[derive(Debug, Default)]
struct MutexOnly {
    inner: MemoryBackend,
    shared: bool,
    obtains: AtomicUsize,
    releases: AtomicUsize,
}

#[async_trait]
impl Layer for MutexOnly {
    fn inner(&self) -> &dyn LockBackend {
        &self.inner
    }

    fn name(&self) -> &'static str {
        "mutex-only"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none().shared(self.shared)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        self.obtains.fetch_add(1, Ordering::SeqCst);
        if !self.shared {
            req.exclusive_only(self.name())?;
        }
        self.inner.obtain(req).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(req).await
    }

    async fn subscribe(&self, _key: &Key) -> Result<Option<ReleaseSubscription>> {
        Ok(None)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn memory() -> Locker {
    Locker::new(Arc::new(MemoryBackend::new()))
}

#[tokio::test(start_paused = true)]
async fn a_shared_obtain_on_a_backend_without_shared_holds_is_refused_before_io() {
    let backend = Arc::new(Layered(MutexOnly::default()));
    let locker = Locker::new(backend.clone());
    for builder in [locker.read("k"), locker.semaphore("k", 3)] {
        let e = builder.try_obtain().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(
            e.to_string()
                .contains("mutex-only backend keeps exclusive locks only"),
            "{e}"
        );
    }
    assert_eq!(
        backend.obtains.load(Ordering::SeqCst),
        0,
        "nothing was sent"
    );
    // The write lock is the mutex, and works.
    let guard = locker
        .write("k")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert_eq!(guard.mode(), Mode::Exclusive);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    // Called directly, past the client layer, the backend refuses it itself.
    let (key, token) = (
        Key::new("k").unwrap(),
        lock_core::backend::Token::generate().unwrap(),
    );
    let holder = lock_core::HolderInfo::current();
    let ttl = lock_core::Ttl::from_millis(1_000).unwrap();
    let req = ObtainRequest::new(&key, &token, ttl, &holder).with_mode(Mode::READ);
    let e = backend.obtain(req).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("keeps exclusive locks only"), "{e}");
    assert_eq!(backend.inspect(&key).await.unwrap(), LockState::Free);
}

#[tokio::test(start_paused = true)]
async fn bad_permits_and_weights_are_refused_before_io() {
    let locker = memory();
    let cases = [
        (locker.semaphore("k", 0), "at least 1 permit"),
        (locker.semaphore("k", 3).weight(4), "1 to 3 permits, not 4"),
        (locker.semaphore("k", 3).weight(0), "1 to 3 permits, not 0"),
        (locker.lock("k").weight(2), "weight() is for semaphores"),
        (locker.read("k").weight(2), "weight() is for semaphores"),
    ];
    for (builder, says) in cases {
        let e = builder.try_obtain().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains(says), "{e}");
    }
    assert_eq!(
        locker
            .backend()
            .inspect(&Key::new("k").unwrap())
            .await
            .unwrap(),
        LockState::Free
    );
}

#[tokio::test(start_paused = true)]
async fn a_semaphore_mismatch_names_both_capacities() {
    let locker = memory();
    let held = locker
        .semaphore("k", 3)
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert_eq!(
        held.mode(),
        Mode::Shared {
            capacity: 3,
            weight: 1
        }
    );
    let e = locker.semaphore("k", 5).try_obtain().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("capacity 3, not 5"), "{e}");
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn a_writer_that_gives_up_lets_readers_in_at_once() {
    let locker = memory().with_retry(Retry::linear(ms(10)).notified());
    let reader = locker
        .read("k")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    // The writer waits 100 ms and gives up; its marker (30 s, its ttl) must go with it.
    let writer = locker.write("k").wait(ms(100)).obtain().await.unwrap();
    match writer {
        Attempt::Busy(busy) => assert_eq!(busy.reason, BusyReason::Shared),
        Attempt::Obtained(_) => panic!("the writer got in past a reader"),
    }
    let second = locker.read("k").try_obtain().await.unwrap();
    assert!(
        !second.is_busy(),
        "a reader is kept out by a writer that gave up: {second:?}"
    );
    assert_eq!(reader.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn readers_behind_a_writer_all_get_in_when_it_releases() {
    // A fallback poll of 10 s: readers that get in within a second were woken.
    let locker = memory().with_retry(Retry::linear(Duration::from_secs(10)).notified());
    let writer = locker
        .write("k")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let start = tokio::time::Instant::now();
    let mut readers = Vec::new();
    for _ in 0..5 {
        let locker = locker.clone();
        readers.push(tokio::spawn(async move {
            let guard = locker
                .read("k")
                .wait(Duration::from_secs(60))
                .obtain()
                .await?;
            Ok::<_, lock_core::Error>(guard.obtained().map(|g| (g, tokio::time::Instant::now())))
        }));
    }
    tokio::time::sleep(ms(50)).await;
    assert_eq!(writer.release().await.unwrap(), ReleaseOutcome::Released);
    // Every reader is awaited before any guard is dropped: a dropped guard's release would
    // wake the rest.
    let mut guards = Vec::new();
    for r in readers {
        let (guard, at) = r.await.unwrap().unwrap().expect("every reader gets in");
        assert!(
            at - start < Duration::from_secs(1),
            "a reader waited for its fallback poll"
        );
        guards.push(guard);
    }
    for guard in guards {
        assert!(guard.mode().is_shared());
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiting_writer_is_not_starved_by_a_stream_of_readers() {
    let locker = memory().with_retry(Retry::linear(ms(5)).notified());
    let first = locker
        .read("k")
        .ttl(ms(200))
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let writer = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .write("k")
                .wait(Duration::from_secs(10))
                .obtain()
                .await
        })
    };
    tokio::time::sleep(ms(20)).await;
    // Readers keep coming every 10 ms, each holding 200 ms: without the marker the key would
    // never drain. With it, none gets in and the writer has it once the first one ends.
    let mut refused = 0;
    for _ in 0..30 {
        match locker.read("k").ttl(ms(200)).try_obtain().await.unwrap() {
            Attempt::Busy(b) => {
                refused += 1;
                assert!(
                    matches!(b.reason, BusyReason::WriterWaiting | BusyReason::Held),
                    "{b}"
                );
            }
            Attempt::Obtained(g) => {
                assert!(
                    writer.is_finished(),
                    "a reader got in while the writer waited"
                );
                assert_eq!(g.release().await.unwrap(), ReleaseOutcome::Released);
            }
        }
        tokio::time::sleep(ms(10)).await;
    }
    assert!(refused > 0);
    let guard = writer
        .await
        .unwrap()
        .unwrap()
        .obtained()
        .expect("the writer got its turn");
    drop(first);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_writer_wait_takes_its_marker_away() {
    let locker = memory().with_retry(Retry::linear(ms(10)).notified());
    let reader = locker
        .read("k")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let waiting = locker.write("k").wait(Duration::from_secs(60)).obtain();
    // Cancelled mid-wait, as a `select!` on a shutdown signal would.
    assert!(tokio::time::timeout(ms(100), waiting).await.is_err());
    tokio::time::sleep(ms(1)).await;
    let second = locker.read("k").try_obtain().await.unwrap();
    assert!(
        !second.is_busy(),
        "a reader is kept out by a cancelled writer: {second:?}"
    );
    assert_eq!(reader.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn a_writer_that_obtains_after_waiting_keeps_its_lock() {
    let locker = memory().with_retry(Retry::linear(ms(10)).notified());
    let reader = locker
        .read("k")
        .ttl(ms(200))
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let writer = locker
        .write("k")
        .wait(Duration::from_secs(5))
        .obtain()
        .await
        .unwrap();
    let writer = writer.obtained().expect("the reader's ttl ends");
    tokio::time::sleep(ms(50)).await;
    assert!(
        locker.read("k").try_obtain().await.unwrap().is_busy(),
        "the writer holds"
    );
    assert_eq!(writer.release().await.unwrap(), ReleaseOutcome::Released);
    drop(reader);
}

#[tokio::test(start_paused = true)]
async fn a_mutex_handoff_on_a_backend_with_shared_holds_wakes_one_waiter_per_release() {
    // Eight waiters behind a holder, a 20 s fallback poll: each release must wake one of
    // them. Each waiter makes two attempts before it waits (the first, and one right after
    // subscribing), then one per wake-up: 8 x 2 + 8 = 24. A writer's marker left behind an
    // exclusive holder made every release wake all of them: 16 + 8 + 7 + ... + 1 = 52.
    let counting = Arc::new(test_servers::locks::Counting::new(Arc::new(
        MemoryBackend::new(),
    )));
    let locker =
        Locker::new(counting.clone()).with_retry(Retry::linear(Duration::from_secs(20)).notified());
    let first = locker
        .lock("herd")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let before = counting.obtains();
    let mut waiters = Vec::new();
    for _ in 0..8 {
        let locker = locker.clone();
        waiters.push(tokio::spawn(async move {
            let guard = locker
                .lock("herd")
                .wait(Duration::from_secs(60))
                .obtain()
                .await;
            let guard = guard
                .unwrap()
                .obtained()
                .expect("each waiter gets its turn");
            tokio::time::sleep(ms(20)).await;
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        }));
    }
    tokio::time::sleep(ms(20)).await;
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    let started = tokio::time::Instant::now();
    for w in waiters {
        w.await.unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a release reached no waiter"
    );
    let attempts = counting.obtains() - before;
    assert!(
        attempts <= 28,
        "{attempts} attempts for 8 handoffs: releases wake more than one waiter"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_only_met_an_exclusive_holder_sends_no_release_when_it_gives_up() {
    let backend = Arc::new(Layered(MutexOnly {
        shared: true,
        ..MutexOnly::default()
    }));
    let locker = Locker::new(backend.clone()).with_retry(Retry::linear(ms(10)));
    let holder = locker
        .lock("k")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let waited = locker.lock("k").wait(ms(100)).obtain().await.unwrap();
    assert!(waited.is_busy());
    assert_eq!(
        backend.releases.load(Ordering::SeqCst),
        0,
        "a give-up behind an exclusive holder, where no marker is ever left, cost a release"
    );
    // Behind a reader it does mark, and takes the marker away: one release.
    assert_eq!(holder.release().await.unwrap(), ReleaseOutcome::Released);
    let reader = locker
        .read("k")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let before = backend.releases.load(Ordering::SeqCst);
    assert!(locker
        .lock("k")
        .wait(ms(100))
        .obtain()
        .await
        .unwrap()
        .is_busy());
    assert_eq!(backend.releases.load(Ordering::SeqCst), before + 1);
    assert_eq!(reader.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn a_shared_release_that_lets_nobody_in_wakes_nobody() {
    let backend = lock_core::MemoryBackend::new();
    test_servers::locks::a_shared_release_that_lets_nobody_in_wakes_nobody(&backend).await;
}
