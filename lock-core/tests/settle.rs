//! `lock_core::settle`: it waits for the calls left to finish in the background, and no
//! longer than it is told. In a test binary of its own: the count it waits on is the
//! process's, and other tests' calls would share it.

use std::future::pending;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::{async_trait, Capabilities, ReleaseRequest};
use lock_core::{LockBackend, LockState, Locker, MemoryBackend, ReleaseOutcome, Result};
use test_servers::locks::{held, state};
use tokio::time::Instant;

/// Releases take 300 ms, or never end.
#[derive(Debug, Default)]
struct SlowRelease {
    inner: MemoryBackend,
    hang: AtomicBool,
}

#[async_trait]
impl Layer for SlowRelease {
    fn inner(&self) -> &dyn LockBackend {
        &self.inner
    }

    fn name(&self) -> &'static str {
        "slow-release"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        if self.hang.load(Ordering::SeqCst) {
            pending::<()>().await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.inner.release(req).await
    }
}

#[tokio::test(start_paused = true)]
async fn settle_waits_for_background_calls_and_no_longer_than_told() {
    let backend = Arc::new(Layered(SlowRelease::default()));
    let locker = Locker::new(backend.clone());
    let within = Duration::from_secs(5);

    // Nothing in the background: at once.
    let start = Instant::now();
    assert!(lock_core::settle(within).await);
    assert_eq!(start.elapsed(), Duration::ZERO);

    // A dropped guard's release runs in the background: settle returns once it ended, and
    // the key is free then.
    drop(held(locker.lock("k")).await);
    let start = Instant::now();
    assert!(lock_core::settle(within).await, "the release ended");
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(state(&locker, "k").await, LockState::Free);

    // A release that never ends: settle gives up at its bound, and says so.
    backend.hang.store(true, Ordering::SeqCst);
    drop(held(locker.lock("k")).await);
    let start = Instant::now();
    assert!(!lock_core::settle(Duration::from_secs(1)).await);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}
