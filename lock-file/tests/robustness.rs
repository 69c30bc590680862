//! Bad input and hostile files: every case is a typed error or handled, never a panic, never
//! a write outside the directory; a holder killed mid-write leaves a readable record.

use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{ObtainRequest, Token};
use lock_core::{
    Attempt, ErrorKind, HolderInfo, Key, LockBackend, LockState, Locker, ObtainOutcome, Ttl,
};
use lock_file::FileBackend;

fn setup() -> (tempfile::TempDir, FileBackend) {
    let tmp = tempfile::tempdir().unwrap();
    let backend = FileBackend::new(tmp.path().join("locks")).unwrap();
    (tmp, backend)
}

async fn obtain(backend: &FileBackend, key: &Key) -> lock_core::Result<ObtainOutcome> {
    let token = Token::generate().unwrap();
    let holder = HolderInfo::current();
    let req = ObtainRequest::new(key, &token, Ttl::from_millis(30_000).unwrap(), &holder);
    backend.obtain(req).await
}

#[tokio::test]
async fn garbage_and_truncated_records_are_corrupt_with_their_path() {
    let (_tmp, backend) = setup();
    let key = Key::new("job").unwrap();
    let path = backend.record_path(&key);
    for bad in [
        &b"\x00\xffgarbage\n"[..],
        b"{\"v\":1,\"key\":\"job\",\"fenc",
        b"{\"v\":99,\"key\":\"job\",\"fencing\":1,\"state\":\"free\"}\n",
    ] {
        std::fs::write(&path, bad).unwrap();
        for err in [
            obtain(&backend, &key).await.unwrap_err(),
            backend.inspect(&key).await.unwrap_err(),
        ] {
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "names the path: {err}"
            );
        }
    }
    // The operator's way out: force_release rewrites it, and fencing starts above the clock.
    assert_eq!(backend.force_release(&key).await.unwrap(), LockState::Free);
    assert!(matches!(
        obtain(&backend, &key).await.unwrap(),
        ObtainOutcome::Acquired { .. }
    ));
}

#[tokio::test]
async fn a_record_of_another_key_is_corrupt() {
    let (_tmp, backend) = setup();
    let (a, b) = (Key::new("a").unwrap(), Key::new("b").unwrap());
    let _ = obtain(&backend, &a).await.unwrap();
    std::fs::copy(backend.record_path(&a), backend.record_path(&b)).unwrap();
    assert_eq!(
        obtain(&backend, &b).await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
}

#[tokio::test]
async fn symlinked_records_are_refused_and_their_target_untouched() {
    let (tmp, backend) = setup();
    let key = Key::new("job").unwrap();
    let target = tmp.path().join("precious");
    std::fs::write(&target, "do not touch").unwrap();
    symlink(&target, backend.record_path(&key)).unwrap();
    assert_eq!(
        obtain(&backend, &key).await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
    assert_eq!(
        backend.inspect(&key).await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "do not touch");
}

#[tokio::test]
async fn path_like_keys_stay_inside_the_directory() {
    let (tmp, backend) = setup();
    let keys = [
        "../escape",
        "/etc/passwd",
        "..",
        "a/../../b",
        "\\..\\x",
        &"z".repeat(1024),
    ];
    for k in keys {
        let _ = obtain(&backend, &Key::new(k).unwrap()).await.unwrap();
    }
    let outside: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        outside,
        ["locks"],
        "nothing written beside the lock directory"
    );
    for entry in std::fs::read_dir(backend.dir()).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap();
        assert!(
            (name.starts_with("k-") || name.starts_with("h-")) && name.ends_with(".lock"),
            "{name}"
        );
        assert!(entry.file_type().unwrap().is_file());
    }
}

#[test]
fn a_file_in_place_of_the_directory_is_a_config_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    assert_eq!(
        FileBackend::new(&file).unwrap_err().kind(),
        ErrorKind::Config
    );
    let under = FileBackend::new(file.join("sub")).unwrap_err();
    assert_eq!(under.kind(), ErrorKind::Unavailable, "{under}");
}

#[tokio::test]
async fn a_removed_directory_is_a_typed_error() {
    let (_tmp, backend) = setup();
    std::fs::remove_dir(backend.dir()).unwrap();
    let err = obtain(&backend, &Key::new("k").unwrap()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retry_safe());
}

/// The child side of the SIGKILL test: obtains and releases as fast as it can, for ever.
#[test]
#[ignore = "run by killed_mid_write_leaves_a_readable_record as a child process"]
fn hammer_worker() {
    let Ok(dir) = std::env::var("LOCK_FILE_HAMMER_DIR") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = std::path::Path::new(&dir).join("../started");
    if std::env::var_os("LOCK_FILE_HAMMER_BIG").is_some() {
        return runtime.block_on(write_big_records(FileBackend::new(dir).unwrap(), started));
    }
    runtime.block_on(async {
        let locker = Locker::new(Arc::new(FileBackend::new(dir).unwrap()));
        std::fs::write(started, "").unwrap();
        loop {
            if let Attempt::Obtained(g) = locker
                .lock("hammer")
                .ttl(Duration::from_millis(1500))
                .try_obtain()
                .await
                .unwrap()
            {
                let _ = g.release().await.unwrap();
            }
            let _ = locker
                .lock("hammer")
                .ttl(Duration::from_millis(1500))
                .try_obtain()
                .await
                .unwrap()
                .obtained()
                .map(std::mem::forget);
        }
    });
}

#[tokio::test]
async fn killed_mid_write_leaves_a_readable_record_and_frees_after_ttl() {
    let (tmp, backend) = setup();
    for round in 0..5 {
        let _ = std::fs::remove_file(tmp.path().join("started"));
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["hammer_worker", "--exact", "--ignored", "--nocapture"])
            .env("LOCK_FILE_HAMMER_DIR", backend.dir())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        while !tmp.path().join("started").exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50 + 37 * round)).await;
        child.kill().unwrap();
        child.wait().unwrap();
        let key = Key::new("hammer").unwrap();
        let state = backend
            .inspect(&key)
            .await
            .expect("the record must stay readable after SIGKILL");
        assert!(
            matches!(state, LockState::Held { .. } | LockState::Free),
            "{state:?}"
        );
        let locker = Locker::new(Arc::new(backend.clone()));
        let got = locker
            .lock("hammer")
            .wait(Duration::from_secs(5))
            .obtain()
            .await
            .unwrap();
        let guard = got
            .obtained()
            .expect("free within the 1.5 s ttl of the dead holder");
        let _ = guard.release().await.unwrap();
    }
}

fn big_key() -> String {
    format!("hammer-{}", "k".repeat(1000))
}

/// Writes records of about 5.5 KiB (they span a page boundary) as fast as it can: every
/// call below changes the record.
async fn write_big_records(backend: FileBackend, started: std::path::PathBuf) {
    let key = Key::new(big_key()).unwrap();
    let holder = HolderInfo::current()
        .with_metadata("m".repeat(4096))
        .unwrap();
    let ttl = Ttl::from_millis(1500).unwrap();
    std::fs::write(started, "").unwrap();
    loop {
        let token = Token::generate().unwrap();
        let req = ObtainRequest::new(&key, &token, ttl, &holder);
        if let ObtainOutcome::Acquired { .. } = backend.obtain(req).await.unwrap() {
            let req = lock_core::backend::ProlongRequest {
                key: &key,
                token: &token,
                ttl,
            };
            let _ = backend.prolongate(req).await.unwrap();
            let req = lock_core::backend::ReleaseRequest {
                key: &key,
                token: &token,
                delay_after: None,
            };
            let _ = backend.release(req).await.unwrap();
        }
    }
}

/// Real processes, really killed. Whether SIGKILL can stop a write between two pages depends
/// on the kernel (it could on the one the bug was found on; a sandboxed kernel may deliver
/// it only between system calls); `a_write_cut_after_any_byte_leaves_the_previous_record`,
/// in the crate, cuts writes at every boundary deterministically.
#[tokio::test]
async fn writers_killed_mid_write_of_page_spanning_records_never_tear_them() {
    // LOCK_FILE_KILLS raises the count (the default keeps CI short).
    let kills: u64 = std::env::var("LOCK_FILE_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(60);
    let (tmp, backend) = setup();
    let key = Key::new(big_key()).unwrap();
    for round in 0..kills {
        let _ = std::fs::remove_file(tmp.path().join("started"));
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["hammer_worker", "--exact", "--ignored", "--nocapture"])
            .env("LOCK_FILE_HAMMER_DIR", backend.dir())
            .env("LOCK_FILE_HAMMER_BIG", "1")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        while !tmp.path().join("started").exists() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        std::thread::sleep(Duration::from_micros(fastrand::u64(0..20_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        let state = backend.inspect(&key).await.unwrap_or_else(|e| {
            panic!("kill {round}: a writer killed mid-write left an unreadable record: {e}")
        });
        assert!(
            matches!(state, LockState::Held { .. } | LockState::Free),
            "{state:?}"
        );
    }
    // And the dead writers' locks free themselves: no operator needed.
    let locker = Locker::new(Arc::new(backend.clone()));
    let guard = locker
        .lock(big_key())
        .wait(Duration::from_secs(5))
        .obtain()
        .await
        .unwrap()
        .obtained()
        .expect("free within the 1.5 s ttl of the dead holders");
    let _ = guard.release().await.unwrap();
}

#[test]
fn a_lock_directory_writable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    for mode in [0o777, 0o770, 0o722] {
        let dir = tmp.path().join(format!("locks-{mode:o}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let err = FileBackend::new(&dir).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
        assert!(err.to_string().contains("chmod 700"), "{err}");
    }
    // A directory it creates itself is owner-only.
    let made = tmp.path().join("made");
    FileBackend::new(&made).unwrap();
    let mode = std::fs::metadata(&made).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn a_lock_directory_of_another_user_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("theirs");
    std::fs::create_dir(&dir).unwrap();
    // As root, hand it to `nobody`; otherwise root's own `/` stands for another user's.
    let dir = if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        dir
    } else {
        std::path::PathBuf::from("/")
    };
    let err = FileBackend::new(&dir).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    assert!(err.to_string().contains("belongs to uid"), "{err}");
}

#[tokio::test]
async fn version_1_records_are_still_read_and_upgraded() {
    let (_tmp, backend) = setup();
    let key = Key::new("old").unwrap();
    let line = format!(
        "{{\"v\":1,\"key\":\"old\",\"fencing\":7,\"state\":\"held\",\"token\":\"{}\",\
         \"holder\":{{\"host\":\"h\",\"pid\":1}},\"holds\":1,\"expires_ms\":{},\
         \"forget_ms\":{}}}     \n",
        "ab".repeat(16),
        u64::MAX / 4,
        u64::MAX / 4
    );
    std::fs::write(backend.record_path(&key), line).unwrap();
    assert!(matches!(
        backend.inspect(&key).await.unwrap(),
        LockState::Held { holds: 1, .. }
    ));
    assert!(matches!(
        obtain(&backend, &key).await.unwrap(),
        ObtainOutcome::Busy(_)
    ));
    backend.force_release(&key).await.unwrap();
    assert!(matches!(
        obtain(&backend, &key).await.unwrap(),
        ObtainOutcome::Acquired { .. }
    ));
}

/// A process stopped while it held a record's file lock (the microseconds of its write)
/// must neither block the runtime's thread nor hang the call: the call ends, retry-safe,
/// after `FILE_LOCK_WAIT`, and other tasks run meanwhile. On its own thread, so that a
/// call that blocks the thread fails the test instead of hanging it.
#[test]
fn a_record_whose_file_lock_is_never_let_go_fails_in_time_without_blocking_the_thread() {
    let (tmp, backend) = setup();
    let key = Key::new("stuck").unwrap();
    let (done, result) = std::sync::mpsc::channel();
    let record = backend.record_path(&key);
    // The file and its lock, as a stopped process would hold them.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&record)
        .unwrap();
    file.lock().unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let outcome = runtime.block_on(async {
            let ticks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counter = Arc::clone(&ticks);
            let ticker = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
            let started = std::time::Instant::now();
            let answer = obtain(&backend, &key).await;
            ticker.abort();
            (
                answer,
                started.elapsed(),
                ticks.load(std::sync::atomic::Ordering::SeqCst),
            )
        });
        let _ = done.send(outcome);
    });
    let (answer, took, ticks) = result
        .recv_timeout(Duration::from_secs(20))
        .expect("the obtain hung on the file lock");
    drop(file);
    drop(tmp);
    let err = answer.expect_err("nobody could read the record");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retry_safe());
    assert!(took >= FileBackend::FILE_LOCK_WAIT, "{took:?}");
    assert!(
        ticks >= 20,
        "the runtime's thread was blocked: {ticks} ticks in {took:?}"
    );
}

/// The fence suite on `lock_file::fence::write`: each test's files in a directory of their
/// own; a store without transactions (writers take turns under the fence's lock file).
mod fence_suite {
    use async_trait::async_trait;
    use lock_conformance::fence::FenceHarness;
    use lock_core::{Fencing, Result};

    struct Files(tempfile::TempDir);

    #[async_trait]
    impl FenceHarness for Files {
        async fn write(&self, resource: &str, token: Fencing, value: &str) -> Result<()> {
            let path = self.0.path().join(resource);
            lock_file::fence::write_async(path, token, value.as_bytes().to_vec()).await
        }

        async fn read(&self, resource: &str) -> Result<Option<String>> {
            match std::fs::read_to_string(self.0.path().join(resource)) {
                Ok(text) => Ok(Some(text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => panic!("reading {resource}: {e}"),
            }
        }
    }

    lock_conformance::fence_suite!("file fence", Files(tempfile::tempdir().unwrap()));
}
