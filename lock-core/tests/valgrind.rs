//! The client runs under valgrind. rustix read the kernel's vDSO itself for
//! `clock_gettime` (the client reads `CLOCK_BOOTTIME` to see suspends), which valgrind does
//! not map: any program that took a lock crashed with SIGSEGV under valgrind
//! (bytecodealliance/rustix#1559), so a user could not profile or memcheck a service that
//! uses the library. lock-core asks rustix for its libc backend (`use-libc`), whose
//! `clock_gettime` is glibc's.
//!
//! The test runs itself again under `valgrind --tool=none` (the crash does not depend on
//! the tool) with one lock taken and released.

use std::process::Command;
use std::sync::Arc;

use lock_core::{Locker, MemoryBackend};

const CHILD: &str = "LOCK_CORE_UNDER_VALGRIND";

#[test]
fn a_lock_is_taken_and_released_under_valgrind() {
    if std::env::var_os(CHILD).is_some() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let locker = Locker::new(Arc::new(MemoryBackend::new()));
            let guard = locker
                .lock("under-valgrind")
                .try_obtain()
                .await
                .unwrap()
                .obtained()
                .expect("a free key");
            assert_eq!(
                guard.release().await.unwrap(),
                lock_core::ReleaseOutcome::Released
            );
        });
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let run = Command::new("valgrind")
        .args(["--tool=none", "-q", "--error-exitcode=99"])
        .arg(&exe)
        .args([
            "--exact",
            "a_lock_is_taken_and_released_under_valgrind",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap_or_else(|e| panic!("valgrind did not start ({e}): `apt-get install valgrind`"));
    assert!(
        run.status.success(),
        "under valgrind: {}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("1 passed"),
        "the child ran the test: {}",
        String::from_utf8_lossy(&run.stdout)
    );
}
