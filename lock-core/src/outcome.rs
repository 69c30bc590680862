//! The one outcome vocabulary every backend speaks.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{HolderInfo, Ttl};

/// A fencing token: issued on every fresh acquisition, strictly increasing per key for ever.
///
/// Pass it to the resource you protect and let the resource refuse writes carrying a token
/// lower than one it has already seen: that is what keeps a paused, expired holder from
/// corrupting data after someone else took the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fencing(pub u64);

impl fmt::Display for Fencing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Why an obtain did not get the lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Busy {
    /// Who holds it, or `None` while the key cools down after a release.
    pub holder: Option<HolderInfo>,
    /// The holder's remaining ttl, or the remaining cooldown.
    #[serde(rename = "remaining_ms", with = "millis")]
    pub remaining: Duration,
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.holder {
            Some(h) => write!(
                f,
                "held by pid {} on {} for another {:?}",
                h.pid, h.host, self.remaining
            )?,
            None => write!(f, "cooling down for another {:?}", self.remaining)?,
        }
        if let Some(Some(meta)) = self.holder.as_ref().map(|h| &h.metadata) {
            write!(f, " ({meta})")?;
        }
        Ok(())
    }
}

/// The answer to [`LockBackend::obtain`](crate::LockBackend::obtain).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum ObtainOutcome {
    /// The lock was free, expired or out of its cooldown, and is now held until `ttl` from
    /// now, under a new fencing token.
    Acquired {
        /// The new fencing token, higher than any this key issued before.
        fencing: Fencing,
        /// The ttl it was taken with.
        ttl: Ttl,
    },
    /// The same token already held it: the hold count went up, the ttl was reset, the
    /// fencing token stays.
    Reacquired {
        /// The hold count now.
        holds: u32,
    },
    /// Someone else holds it, or it cools down after a release.
    Busy(Busy),
}

/// The answer to [`LockBackend::prolongate`](crate::LockBackend::prolongate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum ProlongOutcome {
    /// Held and not expired: it now expires `ttl` from now.
    Prolonged,
    /// It had expired but nobody obtained it since: it is ours again for `ttl`, with the
    /// same fencing token. Exclusion was not broken, but the caller was late.
    ProlongedLate,
    /// Someone else obtained it after it expired, or the record is gone. Nothing changed.
    Lost,
}

/// The answer to [`LockBackend::release`](crate::LockBackend::release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum ReleaseOutcome {
    /// Held and not expired: now free, or cooling down for `delay_after`.
    Released,
    /// A reentrant hold was given back; `holds` remain and the lock is still held.
    Decremented {
        /// The hold count left.
        holds: u32,
    },
    /// It had expired but nobody obtained it since: now released as for `Released`.
    ReleasedLate,
    /// Someone else obtained it, or the record is gone. Nothing changed.
    Lost,
}

/// A snapshot of one key, from [`LockBackend::inspect`](crate::LockBackend::inspect).
///
/// Serializes as JSON an operator can read:
/// `{"state":"held","holder":{...},"fencing":7,"remaining_ms":2900,"holds":1}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum LockState {
    /// Nobody holds it (an expired record kept for late detection also reads as free).
    Free,
    /// Held.
    Held {
        /// Who holds it.
        holder: HolderInfo,
        /// The holder's fencing token.
        fencing: Fencing,
        /// Time left before it expires, by the backend's clock.
        #[serde(rename = "remaining_ms", with = "millis")]
        remaining: Duration,
        /// The reentrant hold count.
        holds: u32,
    },
    /// Released with a cooldown; every obtain is busy until it ends.
    Cooling {
        /// Time left in the cooldown.
        #[serde(rename = "remaining_ms", with = "millis")]
        remaining: Duration,
    },
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
