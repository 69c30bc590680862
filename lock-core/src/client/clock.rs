//! The client's clock: tokio's monotonic clock, plus the time the machine spent suspended.
//!
//! A guard's validity is counted on the client from the moment its request was sent. Tokio's
//! `Instant` is `CLOCK_MONOTONIC` on Linux, which never steps but *stops while the machine
//! is suspended*, while every server's clock (and the file backend's `CLOCK_BOOTTIME`) runs
//! on. Counted on it alone, a laptop that sleeps through a ttl would wake up with a guard
//! that still shows its old `remaining()` while the lock has long been given to someone
//! else. So the client layer reads the time here: tokio's `Instant` moved on by every
//! suspend since the process started (`CLOCK_BOOTTIME - CLOCK_MONOTONIC`, which only
//! grows). Under tokio's paused test clock it still follows tokio's time exactly.
//!
//! A timer cannot count a suspend either: [`sleep_until`] wakes at least every
//! [`STEP`] to look at the clock again, so that after a resume the lost signal fires
//! within one step, not after a whole ttl of monotonic time.

use std::time::Duration;

use tokio::time::Instant;

/// The longest a timer of the client layer sleeps before it looks at the clock again.
pub(crate) const STEP: Duration = Duration::from_secs(1);

/// Now, on the client's clock.
pub(crate) fn now() -> Instant {
    Instant::now() + suspended()
}

/// Sleeps until [`now`] reaches `at`, noticing a suspend within [`STEP`].
///
/// # Cancel safety
/// Cancel safe: it holds nothing.
pub(crate) async fn sleep_until(at: Instant) {
    loop {
        let left = at.saturating_duration_since(now());
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(STEP)).await;
    }
}

/// The time the machine spent suspended since this process first asked.
fn suspended() -> Duration {
    system::suspended() + test_hook::extra()
}

#[cfg(target_os = "linux")]
mod system {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    use std::time::Duration;

    use rustix::time::{clock_gettime, ClockId, Timespec};

    /// The largest suspend offset seen, in nanoseconds: the offset only grows, so a reading
    /// that comes out lower (the two clocks are read one after the other) never moves the
    /// clock back.
    static SEEN: AtomicU64 = AtomicU64::new(0);
    /// `CLOCK_BOOTTIME - CLOCK_MONOTONIC` when the process first asked.
    static BASE: OnceLock<u64> = OnceLock::new();

    /// Two readings of the monotonic clock further apart than this around the boot-time
    /// reading (the thread was preempted between them) are not used.
    const TIGHT_NS: u64 = 50_000;

    fn nanos(t: Timespec) -> u64 {
        let secs = u64::try_from(t.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
        secs.saturating_mul(1_000_000_000).saturating_add(nanos)
    }

    /// `CLOCK_BOOTTIME - CLOCK_MONOTONIC`, read between two monotonic readings at most
    /// [`TIGHT_NS`] apart, so that it is at most that much above the true offset.
    fn offset() -> Option<u64> {
        for _ in 0..3 {
            let before = nanos(clock_gettime(ClockId::Monotonic));
            let boot = nanos(clock_gettime(ClockId::Boottime));
            let after = nanos(clock_gettime(ClockId::Monotonic));
            if after.saturating_sub(before) <= TIGHT_NS {
                return Some(boot.saturating_sub(before));
            }
        }
        None
    }

    pub(super) fn suspended() -> Duration {
        let Some(offset) = offset() else {
            return Duration::from_nanos(SEEN.load(Ordering::Relaxed));
        };
        let base = *BASE.get_or_init(|| offset);
        let since = offset.saturating_sub(base);
        let seen = SEEN.fetch_max(since, Ordering::Relaxed).max(since);
        Duration::from_nanos(seen)
    }
}

#[cfg(not(target_os = "linux"))]
mod system {
    use std::time::Duration;

    /// Elsewhere the monotonic clock is taken as counting suspends (macOS' `Instant` is
    /// `mach_absolute_time`, which does not: see GUARANTEES.md).
    pub(super) fn suspended() -> Duration {
        Duration::ZERO
    }
}

/// A suspend the unit tests pretend happened, on their own thread only.
#[cfg(test)]
pub(crate) mod test_hook {
    use std::cell::Cell;
    use std::time::Duration;

    thread_local! {
        static EXTRA: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    pub(crate) fn extra() -> Duration {
        EXTRA.with(Cell::get)
    }

    /// Pretends the machine was suspended for `d` more, as this thread sees the clock.
    pub(crate) fn suspend(d: Duration) {
        EXTRA.with(|e| e.set(e.get() + d));
    }
}

#[cfg(not(test))]
mod test_hook {
    use std::time::Duration;

    #[inline]
    pub(super) fn extra() -> Duration {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_never_goes_back() {
        let mut last = now();
        for _ in 0..10_000 {
            let t = now();
            assert!(t >= last);
            last = t;
        }
    }

    #[test]
    fn a_suspend_moves_the_clock_on() {
        let before = now();
        test_hook::suspend(Duration::from_secs(30));
        assert!(now() >= before + Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sleep_ends_within_a_step_of_a_suspend() {
        let start = Instant::now();
        let sleep = tokio::spawn(sleep_until(now() + Duration::from_secs(60)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        test_hook::suspend(Duration::from_secs(60));
        sleep.await.unwrap();
        assert!(start.elapsed() <= STEP, "{:?}", start.elapsed());
    }

    /// A machine suspended through a guard's ttl: once it resumes, the guard says it is
    /// lost and shows no time left, and `lost()` fires within one step (on tokio's clock,
    /// which stood still through the suspend).
    #[tokio::test(start_paused = true)]
    async fn a_guard_counts_a_suspend_as_time_gone() {
        use std::sync::Arc;

        use crate::{Locker, MemoryBackend};

        let locker = Locker::new(Arc::new(MemoryBackend::new()));
        let guard = locker
            .lock("suspended")
            .ttl(Duration::from_secs(10))
            .try_obtain()
            .await
            .unwrap()
            .obtained()
            .unwrap();
        let lost = guard.lost_token();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(guard.remaining() > Duration::from_secs(9));

        let resumed = Instant::now();
        test_hook::suspend(Duration::from_secs(20));
        assert_eq!(guard.remaining(), Duration::ZERO);
        assert!(guard.is_lost());
        lost.cancelled().await;
        assert!(resumed.elapsed() <= STEP, "{:?}", resumed.elapsed());
    }

    /// The same with the watchdog: its next renewal comes after the validity ended on the
    /// client's clock, so the guard stays lost even though the backend (whose clock here
    /// did not see the suspend) would still prolong it.
    #[tokio::test(start_paused = true)]
    async fn a_watched_guard_stays_lost_after_a_suspend() {
        use std::sync::Arc;

        use crate::{Locker, MemoryBackend};

        let locker = Locker::new(Arc::new(MemoryBackend::new()));
        let guard = locker
            .lock("suspended")
            .ttl(Duration::from_secs(10))
            .watchdog()
            .try_obtain()
            .await
            .unwrap()
            .obtained()
            .unwrap();
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert!(!guard.is_lost(), "the watchdog holds it before the suspend");
        test_hook::suspend(Duration::from_secs(60));
        tokio::time::timeout(STEP, guard.lost()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(guard.is_lost());
    }
}
