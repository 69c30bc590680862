//! Validated lock durations.

use std::fmt;
use std::time::Duration;

use crate::{Error, Result};

/// How long a lock stays valid without being prolonged: 1 ms to 365 days, in whole
/// milliseconds.
///
/// The same type bounds a release cooldown (`delay_after`). Sub-millisecond parts are
/// rounded down, because every backend stores milliseconds; what is left must be at least
/// 1 ms.
///
/// ```
/// use std::time::Duration;
/// use lock_core::Ttl;
///
/// let ttl = Ttl::new(Duration::from_secs(30))?;
/// assert_eq!(ttl.as_millis(), 30_000);
/// assert!(Ttl::new(Duration::ZERO).is_err());
/// assert!(Ttl::from_millis(366 * 24 * 3600 * 1000).is_err());
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ttl(u64);

impl Ttl {
    /// The shortest ttl.
    pub const MIN: Ttl = Ttl(1);
    /// The longest ttl: 365 days.
    pub const MAX: Ttl = Ttl(365 * 24 * 3600 * 1000);

    /// Validates a duration.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) below 1 ms or above 365 days.
    pub fn new(duration: Duration) -> Result<Self> {
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        Self::from_millis(millis).map_err(|_| {
            Error::invalid(format!(
                "a ttl must lie between 1 ms and 365 days, got {duration:?}"
            ))
        })
    }

    /// Validates a number of milliseconds.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) below 1 or above 365 days.
    pub fn from_millis(millis: u64) -> Result<Self> {
        if !(Self::MIN.0..=Self::MAX.0).contains(&millis) {
            return Err(Error::invalid(format!(
                "a ttl must lie between 1 ms and 365 days, got {millis} ms"
            )));
        }
        Ok(Ttl(millis))
    }

    /// Whole milliseconds.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// As a [`Duration`].
    pub fn as_duration(self) -> Duration {
        Duration::from_millis(self.0)
    }
}

impl fmt::Debug for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.as_duration(), f)
    }
}

impl TryFrom<Duration> for Ttl {
    type Error = Error;
    fn try_from(value: Duration) -> Result<Self> {
        Ttl::new(value)
    }
}

impl From<Ttl> for Duration {
    fn from(ttl: Ttl) -> Duration {
        ttl.as_duration()
    }
}

/// How long a backend keeps an expired record so that a late prolong or release can tell
/// `Late` from `Lost`: 0 to 365 days, in whole milliseconds (by default, each lock's own ttl).
///
/// Bounded like a [`Ttl`], so that `now + ttl + grace` never overflows on any backend and a
/// backend's server never sees a number it cannot store.
///
/// ```
/// use std::time::Duration;
/// use lock_core::backend::Grace;
///
/// assert_eq!(Grace::new(Duration::from_secs(60))?.as_millis(), 60_000);
/// assert!(Grace::new(Duration::MAX).is_err());
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Grace(u64);

impl Grace {
    /// Validates a duration.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) above 365 days.
    pub fn new(duration: Duration) -> Result<Self> {
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        if millis > Ttl::MAX.0 {
            return Err(Error::invalid(format!(
                "a grace period must lie between 0 and 365 days, got {duration:?}"
            )));
        }
        Ok(Grace(millis))
    }

    /// The grace of a lock taken with `ttl` when none is configured: the ttl itself.
    pub fn or_ttl(grace: Option<Grace>, ttl: Ttl) -> Grace {
        grace.unwrap_or(Grace(ttl.0))
    }

    /// Whole milliseconds.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// As a [`Duration`].
    pub fn as_duration(self) -> Duration {
        Duration::from_millis(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_millisecond_parts_round_down() {
        assert_eq!(
            Ttl::new(Duration::from_micros(1999)).unwrap().as_millis(),
            1
        );
        assert!(Ttl::new(Duration::from_micros(999)).is_err());
    }

    #[test]
    fn huge_durations_are_refused_not_wrapped() {
        assert!(Ttl::new(Duration::MAX).is_err());
        assert!(Ttl::new(Ttl::MAX.as_duration()).is_ok());
    }
}
