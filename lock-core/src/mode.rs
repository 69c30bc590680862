//! How a hold shares its key: alone (a mutex, a write lock) or with others up to a capacity
//! (a semaphore's permits, a read lock).

use std::fmt;

use crate::{Error, ErrorKind, Operation, Result};

/// How a hold shares its key.
///
/// - [`Mode::Exclusive`]: one token alone, the mutex ([`Locker::lock`](crate::Locker::lock),
///   [`Locker::write`](crate::Locker::write)).
/// - [`Mode::Shared`]: many tokens at once, each with a `weight`, their live weights together
///   at most `capacity` (a semaphore of `capacity` permits,
///   [`Locker::semaphore`](crate::Locker::semaphore); a read lock is shared with
///   [`Mode::UNBOUNDED`] capacity, [`Locker::read`](crate::Locker::read)).
///
/// The capacity belongs to the key: the first shared hold fixes it while any shared hold
/// (live, or expired within its grace) exists, and a request with another capacity is
/// refused with [`ErrorKind::InvalidInput`] naming both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// One token alone.
    #[default]
    Exclusive,
    /// With other shared holds, their weights together at most `capacity`.
    Shared {
        /// The key's capacity: permits of a semaphore, [`Mode::UNBOUNDED`] for a read lock.
        capacity: u32,
        /// The permits this hold takes, 1 ..= `capacity`.
        weight: u32,
    },
}

impl Mode {
    /// The capacity of a read lock: no bound.
    pub const UNBOUNDED: u32 = u32::MAX;

    /// A read hold: shared, no bound, weight 1.
    pub const READ: Mode = Mode::Shared {
        capacity: Mode::UNBOUNDED,
        weight: 1,
    };

    /// `weight` permits of a semaphore of `capacity`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a capacity of 0, or a weight of 0 or over the capacity.
    pub fn shared(capacity: u32, weight: u32) -> Result<Mode> {
        let mode = Mode::Shared { capacity, weight };
        mode.check("client")?;
        Ok(mode)
    }

    /// Whether this is [`Mode::Shared`].
    pub const fn is_shared(self) -> bool {
        matches!(self, Mode::Shared { .. })
    }

    /// Checks a mode before it is used (the client layer before any I/O; the rules again,
    /// for a caller of the trait), naming `backend` in the error.
    ///
    /// # Errors
    /// As [`Mode::shared`].
    pub fn check(self, backend: &'static str) -> Result<()> {
        match self.problem() {
            Some(msg) => Err(Error::new(
                ErrorKind::InvalidInput,
                backend,
                Operation::Obtain,
                msg,
            )),
            None => Ok(()),
        }
    }

    /// What is wrong with this mode, if anything.
    pub(crate) fn problem(self) -> Option<String> {
        let Mode::Shared { capacity, weight } = self else {
            return None;
        };
        if capacity == 0 {
            return Some("a semaphore needs at least 1 permit, not 0".into());
        }
        if weight == 0 || weight > capacity {
            return Some(format!(
                "a shared hold takes 1 to {} permits, not {weight}",
                Capacity(capacity)
            ));
        }
        None
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Mode::Exclusive => f.write_str("exclusive"),
            Mode::Shared {
                capacity: Mode::UNBOUNDED,
                weight: 1,
            } => f.write_str("read"),
            Mode::Shared { capacity, weight } => {
                write!(f, "{weight} of {} permits", Capacity(capacity))
            }
        }
    }
}

/// A capacity for messages: a number, or "unbounded".
#[derive(Debug, Clone, Copy)]
pub(crate) struct Capacity(pub(crate) u32);

impl fmt::Display for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Mode::UNBOUNDED => f.write_str("unbounded"),
            n => write!(f, "{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_modes_are_checked_before_use() {
        assert!(Mode::shared(0, 1).is_err());
        assert!(Mode::shared(3, 0).is_err());
        let over = Mode::shared(3, 4).unwrap_err();
        assert_eq!(over.kind(), ErrorKind::InvalidInput);
        assert!(over.to_string().contains("1 to 3 permits, not 4"), "{over}");
        assert_eq!(
            Mode::shared(3, 3).unwrap(),
            Mode::Shared {
                capacity: 3,
                weight: 3
            }
        );
        assert!(Mode::READ.check("t").is_ok());
        assert!(Mode::Exclusive.check("t").is_ok());
    }

    #[test]
    fn modes_read_as_words() {
        assert_eq!(Mode::Exclusive.to_string(), "exclusive");
        assert_eq!(Mode::READ.to_string(), "read");
        assert_eq!(Mode::shared(8, 2).unwrap().to_string(), "2 of 8 permits");
    }
}
