//! The clients that wait for wake-ups only: the moments the progress rule checks.

use std::sync::Arc;

use lock_core::{Attempt, LockBackend, Locker, Result as LockResult, Retry};
use tokio::time::Instant;

use super::client::{obtained, released, Held};
use super::{Rng, WAKE};
use crate::harness::ms;
use crate::history::record::{Ask, Call};
use crate::history::recorder::Recorder;

/// A client of [`WAKE`]: it waits for the key with its fallback poll at 6 s, so that only
/// a wake-up gets it the key sooner, holds it up to 300 ms, releases it and stays away
/// for about three seconds.
pub(super) async fn waker(
    n: usize,
    backend: Arc<dyn LockBackend>,
    recorder: Arc<Recorder>,
    end: Instant,
    seed: u64,
) -> LockResult<()> {
    let mut rng = Rng::new(seed.wrapping_add(1000 + n as u64));
    let locker = Locker::new(backend)
        .with_metadata(format!("c{n}"))?
        .with_retry(Retry::exponential(ms(6000), ms(6000)).notified());
    while Instant::now() < end {
        let call = Call::AwaitWake {
            ask: Ask::Exclusive,
        };
        let obtain = locker.lock(WAKE).ttl(ms(3000)).wait(ms(8000)).obtain();
        let (op, got) = recorder
            .call(n, WAKE, call, obtain, |r| {
                obtained(r, lock_core::LockGuard::fencing)
            })
            .await;
        if let Ok(Attempt::Obtained(guard)) = got {
            let held = Held::Guard(guard);
            let until = Instant::now() + rng.millis(50, 300);
            while Instant::now() < until && recorder.claim(op, || held.valid()) {
                tokio::time::sleep(ms(5)).await;
            }
            let release = Call::Release { hold: op };
            let _ = recorder
                .call(n, WAKE, release, held.release(), released)
                .await;
            // Away for longer than the progress bound: whoever waits now must be woken,
            // as the releaser will not take the key back in the meantime.
            tokio::time::sleep(rng.millis(3000, 3500)).await;
        }
    }
    Ok(())
}
