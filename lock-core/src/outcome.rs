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
    /// Who holds it: the exclusive holder, or for a key held shared the hold whose end
    /// opens room for this request; `None` while the key cools down after a release, or
    /// when only a waiting writer keeps a shared request out.
    pub holder: Option<HolderInfo>,
    /// When room can open for this request: the holder's remaining ttl, the remaining
    /// cooldown, or the waiting writer's remaining marker.
    #[serde(rename = "remaining_ms", with = "millis")]
    pub remaining: Duration,
    /// What keeps the request out.
    #[serde(default)]
    pub reason: BusyReason,
    /// How many live holds the key has (1 for an exclusive holder, 0 while cooling).
    #[serde(default)]
    pub holders: u32,
}

/// What keeps an obtain out: [`Busy::reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BusyReason {
    /// Another token holds the key exclusively.
    #[default]
    Held,
    /// Other tokens hold the key shared, and this request is exclusive.
    Shared,
    /// The key's shared holds leave no room for this request's weight.
    Full,
    /// A writer waits for the key: new shared holds stay out until it has had its turn.
    WriterWaiting,
    /// The key cools down after a release.
    Cooling,
}

impl Busy {
    /// Held exclusively by `holder` for another `remaining`.
    pub fn held(holder: HolderInfo, remaining: Duration) -> Self {
        Busy {
            holder: Some(holder),
            remaining,
            reason: BusyReason::Held,
            holders: 1,
        }
    }

    /// Cooling down for another `remaining`.
    pub fn cooling(remaining: Duration) -> Self {
        Busy {
            holder: None,
            remaining,
            reason: BusyReason::Cooling,
            holders: 0,
        }
    }
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let remaining = self.remaining;
        match self.reason {
            BusyReason::Cooling => return write!(f, "cooling down for another {remaining:?}"),
            BusyReason::Held => {}
            BusyReason::Shared => write!(f, "held shared by {} holds; ", self.holders)?,
            BusyReason::Full => write!(f, "full ({} holds); ", self.holders)?,
            BusyReason::WriterWaiting => write!(f, "a writer waits ({} holds); ", self.holders)?,
        }
        match &self.holder {
            Some(h) => write!(
                f,
                "held by pid {} on {} for another {remaining:?}",
                h.pid, h.host
            )?,
            None => write!(f, "room in {remaining:?} at the latest")?,
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
        /// The new fencing token, higher than any this key issued before; for a downgrade
        /// (a shared obtain by the token that holds the key exclusively, once), the
        /// exclusive hold's own, kept.
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
    /// Only for a mode change ([`ObtainRequest::change`](crate::backend::ObtainRequest::change)):
    /// the caller's token has no live hold with the fencing token the change names (it
    /// expired, was force-released, or the backend lost it), so there is nothing to change.
    /// Nothing was written: the caller's lock is lost, whoever holds the key now.
    Lost,
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
///
/// Not `#[must_use]`: `guard.release().await?;` is the common call, and the client layer
/// reports a late or lost release itself (a warning in the log, `Event::Lost` to the
/// observer, the `end` label of the hold metrics), so a caller that has nothing to do about
/// it may ignore the answer without a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Held shared: a semaphore's permits or read holds.
    Shared {
        /// The key's capacity ([`Mode::UNBOUNDED`](crate::Mode::UNBOUNDED) for read locks).
        capacity: u32,
        /// Every live hold, oldest first.
        holds: Vec<SharedHold>,
        /// The remaining life of a waiting writer's marker, which keeps new shared holds
        /// out, if one waits.
        #[serde(
            rename = "writer_waiting_ms",
            with = "opt_millis",
            skip_serializing_if = "Option::is_none",
            default
        )]
        writer_waiting: Option<Duration>,
    },
    /// Released with a cooldown; every obtain is busy until it ends.
    Cooling {
        /// Time left in the cooldown.
        #[serde(rename = "remaining_ms", with = "millis")]
        remaining: Duration,
    },
}

/// One live hold of a key held shared, in [`LockState::Shared`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedHold {
    /// Who holds it.
    pub holder: HolderInfo,
    /// Its fencing token: every admission gets its own.
    pub fencing: Fencing,
    /// Time left before it expires, by the backend's clock.
    #[serde(rename = "remaining_ms", with = "millis")]
    pub remaining: Duration,
    /// Its reentrant hold count.
    pub holds: u32,
    /// The permits it takes.
    pub weight: u32,
}

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::millis::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
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
