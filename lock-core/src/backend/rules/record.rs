//! What a backend stores for a key, as the rules see it, and the clock they decide on.

use std::time::Duration;

use super::Shared;

/// The instant of one decision on the backend's clock, and the clock's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    now: u64,
    tick_ns: u64,
}

impl Clock {
    /// `now_ms` milliseconds of a clock (a wall clock's milliseconds since the epoch).
    pub const fn millis(now_ms: u64) -> Self {
        Clock {
            now: now_ms,
            tick_ns: 1_000_000,
        }
    }

    /// `now_ns` nanoseconds of a clock (a monotonic clock's nanoseconds since some start).
    pub const fn nanos(now_ns: u64) -> Self {
        Clock {
            now: now_ns,
            tick_ns: 1,
        }
    }

    /// The instant, in ticks.
    pub const fn now(self) -> u64 {
        self.now
    }

    /// `ms` milliseconds in ticks.
    pub const fn ticks(self, ms: u64) -> u64 {
        ms.saturating_mul(1_000_000 / self.tick_ns)
    }

    /// The instant `ms` milliseconds from now, in ticks.
    pub const fn after(self, ms: u64) -> u64 {
        self.now.saturating_add(self.ticks(ms))
    }

    /// How long until `at` (zero when it has passed).
    pub fn until(self, at: u64) -> Duration {
        Duration::from_nanos(at.saturating_sub(self.now).saturating_mul(self.tick_ns))
    }
}

/// What a backend stores for a key, whatever its encoding. `T` is how the backend stores the
/// owner token (the [`Token`](crate::backend::Token) itself, its hex, a digest), `H` the
/// holder info ([`HolderInfo`](crate::HolderInfo), or its JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<T, H> {
    /// The key's last fencing token: kept while the record is free or cooling, so that the
    /// next acquisition issues a higher one.
    pub fencing: u64,
    /// Held, shared, cooling or free.
    pub state: State<T, H>,
    /// A waiting writer's marker: while it lives, new shared holds stay out. Only an
    /// exclusive obtain that was busy and asked to queue ([`Obtain::queue`](super::Obtain::queue)) leaves one; a
    /// backend that keeps no shared holds never sees one.
    pub writer: Option<Writer<T>>,
}

impl<T, H> Record<T, H> {
    /// A record without a writer's marker.
    pub const fn new(fencing: u64, state: State<T, H>) -> Self {
        Record {
            fencing,
            state,
            writer: None,
        }
    }
}

/// The state part of a [`Record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State<T, H> {
    /// Released: the record only remembers the fencing token.
    Free,
    /// Released with a delay: every obtain is busy until `until`.
    Cooling {
        /// End of the cooldown, in ticks.
        until: u64,
    },
    /// Held exclusively by `token` (live until `expires`, then expired).
    Held(Hold<T, H>),
    /// Held shared: a semaphore's permits or read holds.
    Shared(Shared<T, H>),
}

/// One token's hold: the exclusive holder, or one of a key's shared holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold<T, H> {
    /// The holder's owner token, as the backend stores it.
    pub token: T,
    /// The holder's info, as the backend stores it.
    pub holder: H,
    /// The reentrant hold count, at least 1.
    pub holds: u32,
    /// End of the ttl, in ticks.
    pub expires: u64,
    /// End of the grace period, in ticks: until then a late prolong or release by `token`
    /// is told apart from a lost one; after it the hold counts as gone.
    pub forget: u64,
}

/// A waiting writer's marker, in [`Record::writer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer<T> {
    /// The waiting writer's token.
    pub token: T,
    /// End of the marker, in ticks: the writer's request ttl after its last busy attempt.
    pub until: u64,
}
