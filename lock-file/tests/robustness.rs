//! Bad input and hostile files: every case is a typed error or handled, never a panic, never
//! a write outside the directory; a holder killed mid-write leaves a readable record.

use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    Attempt, ErrorKind, HolderInfo, Key, LockBackend, LockState, Locker, ObtainOutcome,
    ObtainRequest, Token, Ttl,
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
    let req = ObtainRequest {
        key,
        token: &token,
        ttl: Ttl::from_millis(30_000).unwrap(),
        holder: &holder,
    };
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
    runtime.block_on(async {
        let started = std::path::Path::new(&dir).join("../started");
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
