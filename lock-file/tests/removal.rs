//! A sweep removes the record files nothing needs any more, so a directory of locks holds
//! about the keys in use; a call that opened a file before it was removed opens the path
//! anew, so two holders never lock two different files of one key.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::backend::{ObtainRequest, ReleaseRequest, Token};
use lock_core::{HolderInfo, Key, LockBackend, ObtainOutcome, ReleaseOutcome, Ttl};
use lock_file::FileBackend;

async fn take(backend: &FileBackend, key: &Key, token: &Token, ttl: Duration) -> u64 {
    let holder = HolderInfo::current();
    let req = ObtainRequest::new(key, token, Ttl::new(ttl).unwrap(), &holder);
    match backend.obtain(req).await.unwrap() {
        ObtainOutcome::Acquired { fencing, .. } => fencing.0,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

async fn give_back(backend: &FileBackend, key: &Key, token: &Token, delay: Option<Duration>) {
    let release = ReleaseRequest {
        key,
        token,
        delay_after: delay.map(|d| Ttl::new(d).unwrap()),
    };
    assert_eq!(
        backend.release(release).await.unwrap(),
        ReleaseOutcome::Released
    );
}

/// A sweep removes the files of keys released, of a hold past its grace and of a cooldown
/// that ended, and keeps a held key's and a cooling key's; tokens keep growing after.
#[tokio::test]
async fn a_sweep_removes_what_nothing_needs_and_tokens_still_grow() {
    let dir = tempfile::tempdir().unwrap();
    let backend = FileBackend::new(dir.path().join("locks")).unwrap();
    let key = |k: &str| Key::new(k).unwrap();
    let (released, held, dead, cooling) =
        (key("released"), key("held"), key("dead"), key("cooling"));
    let t = Token::generate().unwrap();
    let first = take(&backend, &released, &t, Duration::from_secs(60)).await;
    give_back(&backend, &released, &t, None).await;
    take(
        &backend,
        &held,
        &Token::generate().unwrap(),
        Duration::from_secs(60),
    )
    .await;
    take(
        &backend,
        &dead,
        &Token::generate().unwrap(),
        Duration::from_millis(20),
    )
    .await;
    let c = Token::generate().unwrap();
    take(&backend, &cooling, &c, Duration::from_secs(60)).await;
    give_back(&backend, &cooling, &c, Some(Duration::from_secs(60))).await;
    // The dead holder's 20 ms and as much grace.
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(
        backend.sweep().await.unwrap(),
        2,
        "the released and the dead key's files"
    );
    for (k, stays) in [
        (&released, false),
        (&held, true),
        (&dead, false),
        (&cooling, true),
    ] {
        assert_eq!(backend.record_path(k).exists(), stays, "{k:?}");
    }
    let again = take(
        &backend,
        &released,
        &Token::generate().unwrap(),
        Duration::from_secs(60),
    )
    .await;
    assert!(again > first, "fencing token {again} after {first}");
}

/// Two backends on one directory (as two processes would be), sixteen tasks taking one key
/// for 20 ms and releasing it after 0 to 30 ms (late a third of the time), while a third
/// backend sweeps the directory without pause: every sweep may remove the file that a task
/// opened and waits to lock. The times each task held the key (from its obtain's answer to
/// its release or the end of its ttl, whichever came first) never overlap (beyond the
/// record's millisecond clock), and the tokens grow in the order the key was taken.
/// Without the check that a locked file is still the key's, a task took the key in the
/// removed file while another took it in a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn takers_racing_the_removal_of_a_key_never_hold_it_together() {
    use tokio::time::Instant;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks");
    let backends = [
        Arc::new(FileBackend::new(&path).unwrap()),
        Arc::new(FileBackend::new(&path).unwrap()),
    ];
    let ttl = Duration::from_millis(20);
    let held = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweeper = {
        let (backend, done) = (FileBackend::new(&path).unwrap(), Arc::clone(&done));
        tokio::spawn(async move {
            let mut removed = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                removed += backend.sweep().await.unwrap();
            }
            removed
        })
    };
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let backend = Arc::clone(&backends[t % 2]);
            let held = Arc::clone(&held);
            tokio::spawn(async move {
                let key = Key::new("contended").unwrap();
                let holder = HolderInfo::current();
                let mut taken = 0u64;
                while taken < 40 {
                    let token = Token::generate().unwrap();
                    let req = ObtainRequest::new(&key, &token, Ttl::new(ttl).unwrap(), &holder);
                    let sent = Instant::now();
                    let ObtainOutcome::Acquired { fencing, .. } =
                        backend.obtain(req).await.unwrap()
                    else {
                        tokio::task::yield_now().await;
                        continue;
                    };
                    let from = Instant::now();
                    let pause = (taken * 7 + t as u64 * 3) % 31;
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    let until = Instant::now().min(sent + ttl);
                    held.lock().unwrap().push((from, until, fencing.0));
                    let release = ReleaseRequest {
                        key: &key,
                        token: &token,
                        delay_after: None,
                    };
                    backend.release(release).await.unwrap();
                    taken += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let removed = sweeper.await.unwrap();
    assert!(
        removed > 10,
        "the sweeps removed the key's file only {removed} times"
    );
    let mut held = held.lock().unwrap().clone();
    assert_eq!(held.len(), 640);
    held.sort_by_key(|(from, _, _)| *from);
    for pair in held.windows(2) {
        let ((_, until, a), (from, _, b)) = (pair[0], pair[1]);
        // The record keeps its times in whole milliseconds.
        assert!(
            from + Duration::from_millis(2) >= until,
            "token {b} held from {:?} before token {a}'s hold ended",
            until - from
        );
        assert!(b > a, "token {b} taken after token {a}");
    }
}
