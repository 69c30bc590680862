//! What a backend declares beyond the contract ([`Capabilities`]), and how its server ends
//! holds ([`Expiry`]).

use std::time::Duration;

use super::listing::Listing;

#[cfg(doc)]
use super::{LockBackend, ObtainRequest};
#[cfg(doc)]
use crate::Mode;

/// What a backend can do beyond the contract, declared so that the client layer and the
/// conformance suite know what to expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Capabilities {
    /// Locks exclude across OS processes (false only for the in-memory backend).
    pub cross_process: bool,
    /// Locks exclude across machines (Redis, Postgres, MariaDB; not the file backend).
    pub cross_host: bool,
    /// [`LockBackend::subscribe`] wakes waiters on release instead of leaving them to poll,
    /// wherever the release happened. A backend that wakes only the waiters of its own
    /// process (lock-mysql: the server sends no notifications) says `false`:
    /// its subscriptions still shorten waits within the process.
    pub release_notification: bool,
    /// How many prolongs [`LockBackend::prolongate_many`] sends in one round trip (1, the
    /// default: it sends one call per lock). The watchdog hands a backend at most this many
    /// at once, in concurrent batches, and applies each batch's answers as it comes back:
    /// a slow answer holds back only the locks that shared its round trip.
    pub prolong_batch: usize,
    /// Shared holds: semaphores and read locks ([`Mode::Shared`]) and the writer's marker
    /// ([`ObtainRequest::queue`]). Without it the client layer refuses a shared obtain
    /// before any I/O, and the conformance suite skips the shared cases.
    pub shared: bool,
    /// How much longer than asked the server may keep a hold or a cooldown:
    /// [`Expiry::EXACT`] (the default: memory, file, Redis, Postgres, MariaDB), or rounded up as a
    /// lease-based store grants them. The client's validity is the ttl asked either way;
    /// the conformance suite widens its timing by it.
    pub expiry: Expiry,
    /// The most shared holds one key is sure to take at once, when the backend keeps all
    /// of a key's holds in one record of bounded size; `None` (the default): as many as the
    /// key's capacity admits. The bound holds for holders whose host name and metadata are
    /// at most 64 printable ASCII bytes each; an obtain past what the record takes is refused with
    /// `InvalidInput`, saying so, and changes nothing. The conformance suite admits
    /// 1,000 readers of one key, or this many when it is fewer.
    pub holds_per_key: Option<usize>,
    /// The backend keeps one small record per key name it ever locked (the key's last
    /// fencing token) until an operator removes it, because its server has no clock that
    /// a client can read to keep tokens growing without it (etcd: the `F` key, about 60
    /// bytes). `false` (the default): once a key's holds, cooldown and grace are over, the
    /// backend keeps nothing of it that does not end by itself, so its storage is bounded by
    /// the keys in use. The conformance suite's `keys_taken_and_released_leave_nothing_behind`
    /// holds a backend to it.
    pub fence_per_key: bool,
    /// Whether and how [`LockBackend::list_keys`](crate::LockBackend::list_keys) walks the
    /// backend's keys ([`Listing::Unsupported`], the default, for a backend that cannot).
    pub listing: Listing,
}

/// How a backend's server ends holds and cooldowns: never before the time asked, and at
/// the latest [`Expiry::longest`] after it was set. A backend whose server keeps times
/// exactly (a clock and a comparison: Redis, Postgres, MariaDB, files, memory) is
/// [`Expiry::EXACT`]. One that grants leases (etcd: whole seconds, at least one or two, ended
/// by a check every 500 ms) declares how it rounds them, so that the conformance suite
/// expects an expired hold only when the longest it may last has passed. Such a backend may
/// answer a hold's remaining time as the ttl it was last set for: never less than what is
/// left.
///
/// ```
/// use std::time::Duration;
/// use lock_core::backend::Expiry;
///
/// let leases = Expiry {
///     granularity: Duration::from_secs(1),
///     minimum: Duration::from_secs(2),
///     lag: Duration::from_millis(500),
/// };
/// assert_eq!(leases.longest(Duration::from_millis(150)), Duration::from_millis(2_500));
/// assert_eq!(leases.longest(Duration::from_millis(2_100)), Duration::from_millis(3_500));
/// assert_eq!(Expiry::EXACT.longest(Duration::from_millis(150)), Duration::from_millis(150));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Expiry {
    /// Times are rounded up to a multiple of this (zero: not rounded).
    pub granularity: Duration,
    /// No hold or cooldown is shorter than this on the server.
    pub minimum: Duration,
    /// How long after its (rounded) end a hold may still be there.
    pub lag: Duration,
}

impl Expiry {
    /// Holds and cooldowns end exactly when asked.
    pub const EXACT: Expiry = Expiry {
        granularity: Duration::ZERO,
        minimum: Duration::ZERO,
        lag: Duration::ZERO,
    };

    /// The longest a hold or cooldown of `asked` may last on the server.
    pub fn longest(&self, asked: Duration) -> Duration {
        let at_least = asked.max(self.minimum);
        let rounded = if self.granularity.is_zero() {
            at_least
        } else {
            let g = self.granularity.as_nanos();
            let n = at_least.as_nanos().div_ceil(g).saturating_mul(g);
            Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX))
        };
        rounded.saturating_add(self.lag)
    }

    /// Whether the server keeps times exactly as asked.
    pub fn is_exact(&self) -> bool {
        *self == Expiry::EXACT
    }
}

impl Capabilities {
    /// No capabilities; set fields with the builder methods.
    pub const fn none() -> Self {
        Capabilities {
            cross_process: false,
            cross_host: false,
            release_notification: false,
            prolong_batch: 1,
            shared: false,
            expiry: Expiry::EXACT,
            holds_per_key: None,
            fence_per_key: false,
            listing: Listing::Unsupported,
        }
    }

    /// Sets [`Capabilities::cross_process`].
    pub const fn cross_process(mut self, yes: bool) -> Self {
        self.cross_process = yes;
        self
    }

    /// Sets [`Capabilities::cross_host`].
    pub const fn cross_host(mut self, yes: bool) -> Self {
        self.cross_host = yes;
        self
    }

    /// Sets [`Capabilities::release_notification`].
    pub const fn release_notification(mut self, yes: bool) -> Self {
        self.release_notification = yes;
        self
    }

    /// Sets [`Capabilities::shared`].
    pub const fn shared(mut self, yes: bool) -> Self {
        self.shared = yes;
        self
    }

    /// Sets [`Capabilities::expiry`].
    pub const fn expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = expiry;
        self
    }

    /// Sets [`Capabilities::holds_per_key`].
    pub const fn holds_per_key(mut self, most: usize) -> Self {
        self.holds_per_key = Some(most);
        self
    }

    /// Sets [`Capabilities::fence_per_key`].
    pub const fn fence_per_key(mut self, yes: bool) -> Self {
        self.fence_per_key = yes;
        self
    }

    /// Sets [`Capabilities::listing`].
    pub const fn listing(mut self, how: Listing) -> Self {
        self.listing = how;
        self
    }

    /// Sets [`Capabilities::prolong_batch`] (0 counts as 1).
    pub const fn prolong_batch(mut self, locks: usize) -> Self {
        self.prolong_batch = if locks == 0 { 1 } else { locks };
        self
    }
}
