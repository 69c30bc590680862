//! The time of the cases that time an expiry, stretched for a backend whose server ends
//! holds later than asked ([`Expiry`]).
//!
//! Each such case has a timeline in milliseconds written for an exact backend: a ttl, then
//! a step that expects the hold ended at least [`MARGIN`] after it, or a late call that
//! lands after the ttl and before its grace ends. On a backend whose server may keep a
//! hold up to [`Expiry::longest`], the case runs the same timeline with every duration
//! multiplied by [`Pace::scale`]: large enough that the longest a hold may outlast its ttl
//! (a rounding step and the lag) fits in the stretched margin, and that the shortest ttl a
//! case asks for ([`SHORTEST_TTL`]) reaches the server's minimum. An exact backend runs at
//! scale 1, the timeline as written.

use std::time::Duration;

use lock_core::backend::Expiry;
use lock_core::LockBackend;

/// The least time a case leaves between a hold's ttl (or cooldown) and the step that
/// expects it over.
pub(crate) const MARGIN: Duration = Duration::from_millis(100);

/// The shortest ttl or cooldown a timed case asks for.
pub(crate) const SHORTEST_TTL: Duration = Duration::from_millis(100);

/// A timed case's clock for one backend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    scale: u32,
    expiry: Expiry,
}

impl Pace {
    /// The pace for `backend`, from the expiry it declares; says on stderr when it
    /// stretches the case, so that a slow case is never a mystery.
    pub(crate) fn of(backend: &dyn LockBackend, case: &str) -> Self {
        let pace = Pace::for_expiry(backend.capabilities().expiry);
        if pace.scale > 1 {
            crate::cases::report(format_args!(
                "{case}: the backend may keep holds up to {:?} longer than asked ({:?}): the \
                 case runs its timeline {} times slower, and checks remaining times against \
                 the longest a hold may last",
                pace.expiry.longest(SHORTEST_TTL) - SHORTEST_TTL,
                pace.expiry,
                pace.scale()
            ));
        }
        pace
    }

    /// The pace for a backend that declares `expiry`.
    pub(crate) fn for_expiry(expiry: Expiry) -> Self {
        let late = expiry.granularity + expiry.lag;
        let scale = ceil_div(late, MARGIN).max(ceil_div(expiry.minimum, SHORTEST_TTL));
        Pace {
            scale: scale.max(1),
            expiry,
        }
    }

    /// How many times slower than written the case runs.
    pub(crate) fn scale(&self) -> u32 {
        self.scale
    }

    /// `n` milliseconds of the written timeline.
    pub(crate) fn ms(&self, n: u64) -> Duration {
        Duration::from_millis(n.saturating_mul(u64::from(self.scale)))
    }

    /// The longest a hold or cooldown of `asked` may last on the server.
    pub(crate) fn longest(&self, asked: Duration) -> Duration {
        self.expiry.longest(asked)
    }

    /// Whether the server ends holds exactly when asked.
    pub(crate) fn is_exact(&self) -> bool {
        self.expiry.is_exact()
    }
}

fn ceil_div(a: Duration, b: Duration) -> u32 {
    u32::try_from(a.as_nanos().div_ceil(b.as_nanos())).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_backend_runs_the_timeline_as_written() {
        let pace = Pace::for_expiry(Expiry::EXACT);
        assert_eq!(pace.scale(), 1);
        assert_eq!(pace.ms(600), Duration::from_millis(600));
    }

    /// Stretched by the scale, a hold asked for any ttl of the cases is over by the margin
    /// after it, and the shortest ttl reaches the server's minimum.
    #[test]
    fn the_stretched_margin_covers_the_longest_a_hold_may_last() {
        for expiry in [
            Expiry {
                granularity: Duration::from_secs(1),
                minimum: Duration::from_secs(1),
                lag: Duration::from_secs(1),
            },
            Expiry {
                granularity: Duration::from_millis(200),
                minimum: Duration::from_millis(400),
                lag: Duration::ZERO,
            },
            Expiry {
                granularity: Duration::ZERO,
                minimum: Duration::from_secs(2),
                lag: Duration::from_millis(30),
            },
        ] {
            let pace = Pace::for_expiry(expiry);
            for ttl in [100, 150, 200, 300, 600, 700, 1_000, 2_000, 4_000] {
                let asked = pace.ms(ttl);
                assert!(
                    pace.longest(asked) <= asked + pace.ms(100),
                    "{expiry:?} at scale {}: {ttl} ms",
                    pace.scale()
                );
            }
        }
    }
}
