//! `Locker::lock_all`: several keys at once, all or nothing, on the memory backend.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use lock_core::{Attempt, ErrorKind, LockBackend, Locker, MemoryBackend, ReleaseOutcome, Retry};

fn locker() -> Locker {
    Locker::new(Arc::new(MemoryBackend::new())).with_retry(
        Retry::exponential(Duration::from_millis(1), Duration::from_millis(20)).notified(),
    )
}

async fn is_free(locker: &Locker, key: &str) -> bool {
    match locker.lock(key).try_obtain().await.expect("a try") {
        Attempt::Obtained(g) => {
            assert_eq!(
                g.release().await.expect("release"),
                ReleaseOutcome::Released
            );
            true
        }
        Attempt::Busy(_) => false,
    }
}

#[tokio::test]
async fn every_key_is_held_with_its_own_fencing_token_then_released() {
    let locker = locker();
    let set = locker
        .lock_all(["c", "a", "b", "a"])
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .expect("all free");
    let keys: Vec<&str> = set.fencing().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c"], "sorted, each once");
    for key in ["a", "b", "c"] {
        assert!(!is_free(&locker, key).await, "{key} is held");
    }
    let released = set.release().await.unwrap();
    assert!(released
        .iter()
        .all(|(_, outcome)| *outcome == ReleaseOutcome::Released));
    for key in ["a", "b", "c"] {
        assert!(is_free(&locker, key).await, "{key} was released");
    }
}

#[tokio::test]
async fn a_busy_key_leaves_none_of_the_others_held() {
    let locker = locker();
    let b = locker
        .lock("b")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let attempt = locker.lock_all(["a", "b", "c"]).try_obtain().await.unwrap();
    assert!(attempt.is_busy());
    assert!(is_free(&locker, "a").await, "a was given back");
    assert!(is_free(&locker, "c").await, "c was never taken");
    // With a wait that runs out, the same.
    let attempt = locker
        .lock_all(["a", "b", "c"])
        .wait(Duration::from_millis(50))
        .obtain()
        .await
        .unwrap();
    assert!(attempt.is_busy());
    assert!(is_free(&locker, "a").await);
    assert!(is_free(&locker, "c").await);
    assert_eq!(b.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn it_waits_for_a_busy_key_and_then_takes_them_all() {
    let locker = locker();
    let b = locker
        .lock("b")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .lock_all(["a", "b", "c"])
                .wait(Duration::from_secs(10))
                .obtain()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        is_free(&locker, "a").await,
        "nothing is held while waiting for b"
    );
    assert_eq!(b.release().await.unwrap(), ReleaseOutcome::Released);
    let set = waiter
        .await
        .unwrap()
        .unwrap()
        .obtained()
        .expect("all three");
    assert_eq!(set.guards().len(), 3);
    set.release().await.unwrap();
}

/// Four tasks take overlapping sets in opposite orders, many times: all finish (no
/// deadlock) and no key ever has two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_in_any_order_never_deadlock_nor_overlap() {
    let locker = locker();
    let inside: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    let sets: [&[usize]; 4] = [&[0, 1], &[1, 0], &[2, 1, 0], &[0, 2]];
    let mut tasks = Vec::new();
    for set in sets {
        let (locker, inside) = (locker.clone(), Arc::clone(&inside));
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let keys: Vec<String> = set.iter().map(|i| format!("k{i}")).collect();
                let held = locker
                    .lock_all(&keys)
                    .wait(Duration::from_secs(30))
                    .obtain()
                    .await
                    .unwrap()
                    .obtained()
                    .expect("within the wait");
                for &i in set {
                    assert_eq!(
                        inside[i].fetch_add(1, Ordering::SeqCst),
                        0,
                        "k{i} held twice"
                    );
                }
                tokio::task::yield_now().await;
                for &i in set {
                    inside[i].fetch_sub(1, Ordering::SeqCst);
                }
                held.release().await.unwrap();
            }
        }));
    }
    let all = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("no deadlock");
}

#[tokio::test]
async fn lost_fires_when_any_key_is_lost() {
    let backend = Arc::new(MemoryBackend::new());
    let locker = Locker::new(backend.clone());
    let set = locker
        .lock_all(["x", "y"])
        .ttl(Duration::from_secs(30))
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert!(!set.is_lost());
    let key = locker.key("y").unwrap();
    backend.force_release(&key).await.unwrap();
    // The guard of y learns it on its next call: a prolong answers Lost.
    let y = &set.guards()[1];
    assert_eq!(y.key().as_str(), "y");
    assert_eq!(
        y.prolongate(Duration::from_secs(30)).await.unwrap(),
        lock_core::ProlongOutcome::Lost
    );
    tokio::time::timeout(Duration::from_secs(5), set.lost())
        .await
        .expect("lost fires");
    assert!(set.is_lost());
    let _ = set.release().await;
}

/// The caller cancelled at every moment of a lock_all that meets a busy key, whose holder
/// lets go meanwhile: before anything was taken, with keys taken and given back, while
/// waiting, and with the whole set taken but not yet handed over. Nothing stays held once
/// the background releases ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_lock_all_leaves_nothing_held() {
    let locker = locker();
    for cut_us in (0..40).map(|i| i * 250) {
        let c = locker
            .lock("c")
            .try_obtain()
            .await
            .unwrap()
            .obtained()
            .unwrap();
        let letting_go = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            c.release().await.unwrap()
        });
        let call = locker
            .lock_all(["a", "b", "c", "d"])
            .wait(Duration::from_secs(10))
            .obtain();
        match tokio::time::timeout(Duration::from_micros(cut_us), call).await {
            Ok(done) => {
                let set = done.unwrap().obtained().expect("all four");
                set.release().await.unwrap();
            }
            Err(_cut) => {}
        }
        assert_eq!(letting_go.await.unwrap(), ReleaseOutcome::Released);
        assert!(
            lock_core::settle(Duration::from_secs(5)).await,
            "background calls ended"
        );
        for key in ["a", "b", "c", "d"] {
            assert!(
                is_free(&locker, key).await,
                "{key} held after a cut at {cut_us} µs"
            );
        }
    }
}

#[tokio::test]
async fn an_empty_set_or_a_bad_key_is_refused_before_any_call() {
    let locker = locker();
    let none: [&str; 0] = [];
    let e = locker.lock_all(none).try_obtain().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = locker.lock_all(["ok", ""]).try_obtain().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(is_free(&locker, "ok").await, "nothing taken");
}

/// `read()`: every key a read hold. Readers of overlapping sets share, a writer of any of
/// the keys waits, and readers and writers of overlapping sets in opposite orders never
/// deadlock nor overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_sets_share_with_readers_and_exclude_writers() {
    let locker = Arc::new(locker());
    let a = locker
        .lock_all(["x", "y"])
        .read()
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .expect("free");
    let b = locker
        .lock_all(["y", "z"])
        .read()
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .expect("readers share y");
    assert!(b.guards().iter().all(|g| g.mode().is_shared()));
    assert!(locker.lock_all(["z"]).try_obtain().await.unwrap().is_busy());
    assert!(locker.lock("y").try_obtain().await.unwrap().is_busy());
    a.release().await.unwrap();
    b.release().await.unwrap();

    // Writers count who is inside each key; a reader must never meet a writer inside.
    let writers: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    let readers: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    let mut tasks = Vec::new();
    for t in 0..8usize {
        let (locker, writers, readers) = (
            Arc::clone(&locker),
            Arc::clone(&writers),
            Arc::clone(&readers),
        );
        tasks.push(tokio::spawn(async move {
            let names = ["p", "q", "r"];
            let set: Vec<usize> = if t % 2 == 0 {
                vec![0, 1, 2]
            } else {
                vec![2, 1]
            };
            for _ in 0..20 {
                let read = t % 3 != 0;
                let builder = locker.lock_all(set.iter().map(|&i| names[i]));
                let builder = if read { builder.read() } else { builder };
                let held = builder
                    .wait(Duration::from_secs(30))
                    .obtain()
                    .await
                    .unwrap()
                    .obtained()
                    .expect("within 30 s");
                for &i in &set {
                    let (mine, theirs) = match read {
                        true => (&readers[i], &writers[i]),
                        false => (&writers[i], &readers[i]),
                    };
                    let before = mine.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(theirs.load(Ordering::SeqCst), 0, "a reader met a writer");
                    assert!(read || before == 0, "two writers of one key");
                }
                tokio::task::yield_now().await;
                for &i in &set {
                    match read {
                        true => readers[i].fetch_sub(1, Ordering::SeqCst),
                        false => writers[i].fetch_sub(1, Ordering::SeqCst),
                    };
                }
                held.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("no deadlock")
            .unwrap();
    }
    for key in ["p", "q", "r"] {
        assert!(is_free(&locker, key).await, "{key} left held");
    }
}

/// The rule that makes overlapping sets deadlock-free: a set waits for one key only, and
/// holds nothing meanwhile. Here it waits for `b`, gets it, then finds `a` busy: it gives
/// `b` back and waits for `a`, rather than sitting on `b` while it waits (which, with
/// another caller holding `a` and waiting for `b`, would never end).
#[tokio::test]
async fn a_set_never_waits_for_a_key_while_it_holds_another() {
    let locker = locker();
    let hold = |key: &'static str| {
        let locker = locker.clone();
        async move {
            locker
                .lock(key)
                .try_obtain()
                .await
                .unwrap()
                .obtained()
                .unwrap()
        }
    };
    let b = hold("b").await;
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .lock_all(["a", "b"])
                .wait(Duration::from_secs(10))
                .obtain()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // While the set waits for b, a is taken by somebody else; then b is let go.
    let a = hold("a").await;
    assert_eq!(b.release().await.unwrap(), ReleaseOutcome::Released);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        is_free(&locker, "b").await,
        "the set sits on b while it waits for a"
    );
    assert_eq!(a.release().await.unwrap(), ReleaseOutcome::Released);
    let set = waiter.await.unwrap().unwrap().obtained().expect("both");
    // What the set's guard tells of itself.
    assert!(
        set.remaining() > Duration::from_secs(10),
        "{:?}",
        set.remaining()
    );
    assert!(
        set.lost().now_or_never().is_none(),
        "lost() before any loss"
    );
    assert!(format!("{set:?}").contains("\"b\""), "{set:?}");
    let guards = set.into_guards();
    assert_eq!(guards.len(), 2);
    for guard in guards {
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
}
