//! A released key's record file is removed, so a directory of locks holds only the keys in
//! use; a call that opened the file before it was removed opens the path anew, so two
//! holders never lock two different files of one key.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::backend::{ObtainRequest, ReleaseRequest, Token};
use lock_core::{HolderInfo, Key, LockBackend, ObtainOutcome, ReleaseOutcome, Ttl};
use lock_file::FileBackend;

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).unwrap()
}

#[tokio::test]
async fn a_released_key_leaves_no_file_and_its_tokens_still_grow() {
    let dir = tempfile::tempdir().unwrap();
    let backend = FileBackend::new(dir.path().join("locks")).unwrap();
    let key = Key::new("jobs/nightly").unwrap();
    let holder = HolderInfo::current();
    let mut last = 0;
    for _ in 0..3 {
        let token = Token::generate().unwrap();
        let fencing = match backend
            .obtain(ObtainRequest::new(&key, &token, ttl(), &holder))
            .await
            .unwrap()
        {
            ObtainOutcome::Acquired { fencing, .. } => fencing.0,
            other => panic!("expected Acquired, got {other:?}"),
        };
        assert!(fencing > last, "fencing token {fencing} after {last}");
        last = fencing;
        assert!(
            backend.record_path(&key).exists(),
            "a held key has its file"
        );
        let released = backend
            .release(ReleaseRequest {
                key: &key,
                token: &token,
                delay_after: None,
            })
            .await
            .unwrap();
        assert_eq!(released, ReleaseOutcome::Released);
        assert!(
            !backend.record_path(&key).exists(),
            "a released key's file is still there"
        );
    }
}

/// Two backends on one directory (as two processes would be), sixteen tasks taking one key
/// for 20 ms and releasing it after 0 to 30 ms (late a third of the time): every release
/// removes the file that another task may have opened and be waiting to lock, its last
/// record an expired hold after a late release. The times each task held the key (from
/// its obtain's answer to its release or the end of its ttl, whichever came first) never
/// overlap (beyond the record's millisecond clock), and the tokens grow in the order the key was taken. Without the check that a
/// locked file is still the key's, a task took the expired hold in the removed file while
/// another took the key in a new one.
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
