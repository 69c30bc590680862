//! How a waiting obtain spaces its attempts.

use std::time::Duration;

/// A retry strategy for a waiting obtain: how long to wait before each new attempt, and
/// whether to wake early on the backend's release notification.
///
/// Every delay is jittered, because pollers with a fixed interval fall into step on the
/// timer and wake in bunches: [`Retry::linear`] waits 50–150 % of its interval,
/// [`Retry::exponential`] waits 100–150 % of its current step, capped at its maximum. The
/// obtain's own deadline always wins over the strategy.
///
/// ```
/// use std::time::Duration;
/// use lock_core::Retry;
///
/// let retry = Retry::exponential(Duration::from_millis(10), Duration::from_secs(1)).limit(5);
/// assert!(retry.delay(0).unwrap() >= Duration::from_millis(10));
/// assert!(retry.delay(4).is_some());
/// assert!(retry.delay(5).is_none(), "five retries at most");
/// assert!(Retry::none().delay(0).is_none());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    schedule: Schedule,
    limit: Option<u32>,
    notified: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Schedule {
    Never,
    Linear(Duration),
    Exponential { min: Duration, max: Duration },
}

impl Retry {
    /// One attempt, no retry.
    pub fn none() -> Self {
        Retry {
            schedule: Schedule::Never,
            limit: None,
            notified: false,
        }
    }

    /// A new attempt every `interval` (jittered to 50–150 %).
    pub fn linear(interval: Duration) -> Self {
        Retry {
            schedule: Schedule::Linear(interval),
            limit: None,
            notified: false,
        }
    }

    /// Delays that double from `min` up to `max` (each jittered up to +50 %, never over
    /// `max`). `max` below `min` is raised to `min`.
    pub fn exponential(min: Duration, max: Duration) -> Self {
        Retry {
            schedule: Schedule::Exponential {
                min,
                max: max.max(min),
            },
            limit: None,
            notified: false,
        }
    }

    /// At most `retries` attempts after the first.
    pub fn limit(mut self, retries: u32) -> Self {
        self.limit = Some(retries);
        self
    }

    /// Wakes as soon as the backend announces a release of the key, with this strategy as
    /// the fallback poll (a lost notification then costs latency, never a missed lock).
    /// Backends without notifications simply poll.
    pub fn notified(mut self) -> Self {
        self.notified = true;
        self
    }

    /// Whether this strategy listens for release notifications.
    pub fn is_notified(&self) -> bool {
        self.notified
    }

    /// The delay before retry number `retry` (0 for the first retry), or `None` when the
    /// strategy gives up.
    pub fn delay(&self, retry: u32) -> Option<Duration> {
        if self.limit.is_some_and(|limit| retry >= limit) {
            return None;
        }
        match self.schedule {
            Schedule::Never => None,
            Schedule::Linear(interval) => Some(scale(interval, 0.5 + fastrand::f64())),
            Schedule::Exponential { min, max } => {
                let step = min.saturating_mul(1u32 << retry.min(31)).min(max);
                Some(scale(step, 1.0 + fastrand::f64() / 2.0).min(max))
            }
        }
    }
}

/// `d` times `factor` (non-negative), saturating at [`Duration::MAX`] where
/// `Duration::mul_f64` would panic.
fn scale(d: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

impl Default for Retry {
    /// Exponential from 5 ms to 250 ms, woken by release notifications where the backend has
    /// them.
    fn default() -> Self {
        Retry::exponential(Duration::from_millis(5), Duration::from_millis(250)).notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn exponential_delays_stay_within_bounds(min_ms in 1u64..1000, extra in 0u64..10_000, n in 0u32..100) {
            let (min, max) = (Duration::from_millis(min_ms), Duration::from_millis(min_ms + extra));
            let d = Retry::exponential(min, max).delay(n).unwrap();
            prop_assert!(d >= min && d <= max, "{d:?} outside [{min:?}, {max:?}]");
        }

        #[test]
        fn exponential_steps_never_shrink(min_ms in 1u64..100, n in 0u32..12) {
            let r = Retry::exponential(Duration::from_millis(min_ms), Duration::from_secs(3600));
            // The floor of step n+1 (no jitter) is the ceiling-free double of step n's floor.
            let floor = |k: u32| Duration::from_millis(min_ms).saturating_mul(1 << k);
            prop_assert!(r.delay(n + 1).unwrap() >= floor(n + 1));
            prop_assert!(r.delay(n).unwrap() <= floor(n).mul_f64(1.5));
        }

        #[test]
        fn linear_delays_are_jittered_around_the_interval(ms in 1u64..10_000, n in 0u32..1000) {
            let i = Duration::from_millis(ms);
            let d = Retry::linear(i).delay(n).unwrap();
            prop_assert!(d >= i / 2 && d <= i.mul_f64(1.5));
        }

        #[test]
        fn huge_intervals_saturate_instead_of_panicking(secs in (u64::MAX / 4)..=u64::MAX, n in 0u32..64) {
            let huge = Duration::new(secs, 999_999_999);
            prop_assert!(Retry::linear(huge).delay(n).unwrap() >= huge / 2);
            prop_assert!(Retry::exponential(huge, Duration::MAX).delay(n).unwrap() >= huge);
        }

        #[test]
        fn limit_counts_retries(limit in 0u32..50) {
            let r = Retry::linear(Duration::from_millis(1)).limit(limit);
            prop_assert!((0..limit).all(|n| r.delay(n).is_some()));
            prop_assert!(r.delay(limit).is_none());
        }
    }

    #[test]
    fn first_exponential_delay_is_near_the_minimum() {
        let min = Duration::from_millis(10);
        for _ in 0..100 {
            let d = Retry::exponential(min, Duration::from_secs(1))
                .delay(0)
                .unwrap();
            assert!(d >= min && d <= min.mul_f64(1.5), "{d:?}");
        }
    }

    #[test]
    fn jitter_spreads_pollers() {
        let r = Retry::linear(Duration::from_millis(100));
        let distinct: std::collections::HashSet<_> = (0..50).map(|_| r.delay(0)).collect();
        assert!(
            distinct.len() > 40,
            "jitter should spread delays: {}",
            distinct.len()
        );
    }

    #[test]
    fn none_never_retries() {
        assert_eq!(Retry::none().delay(0), None);
    }
}
