//! Where a record stands at one instant ([`Phase`]), and the fencing tokens it carries.

use super::{Clock, Hold, Record, Shared, State, Writer};

/// Where a record stands at one instant.
pub(super) enum Phase<'r, T, H> {
    /// No record, a free one, or one past its grace period (or its cooldown).
    Free,
    Cooling {
        until: u64,
    },
    Live(&'r Hold<T, H>),
    Expired(&'r Hold<T, H>),
    /// Shared holds, at least one of them within its grace.
    Shared(&'r Shared<T, H>),
}

pub(super) fn phase<T, H>(record: Option<&Record<T, H>>, clock: Clock) -> Phase<'_, T, H> {
    let now = clock.now();
    match record.map(|r| &r.state) {
        None | Some(State::Free) => Phase::Free,
        Some(State::Cooling { until }) if *until > now => Phase::Cooling { until: *until },
        Some(State::Cooling { .. }) => Phase::Free,
        Some(State::Held(h)) if h.forget <= now => Phase::Free,
        Some(State::Held(h)) if h.expires > now => Phase::Live(h),
        Some(State::Held(h)) => Phase::Expired(h),
        Some(State::Shared(s)) if s.remembered(clock) => Phase::Shared(s),
        Some(State::Shared(_)) => Phase::Free,
    }
}

/// The live writer's marker of `record`, if any.
pub(super) fn live_writer<T, H>(record: Option<&Record<T, H>>, clock: Clock) -> Option<&Writer<T>> {
    record
        .and_then(|r| r.writer.as_ref())
        .filter(|w| w.until > clock.now())
}

/// Whether `record` says no more than a missing record would (free, past its grace period,
/// or its cooldown over, and no writer waiting), apart from its fencing token: a backend
/// that keeps fencing elsewhere may delete it.
pub fn forgotten<T, H>(record: &Record<T, H>, clock: Clock) -> bool {
    matches!(phase(Some(record), clock), Phase::Free) && live_writer(Some(record), clock).is_none()
}

/// The key's last fencing token (0 without a record).
pub(super) fn last_fencing<T, H>(record: Option<&Record<T, H>>) -> u64 {
    record.map_or(0, |r| r.fencing)
}

/// The fencing floor of a backend whose decisions read no wall clock (the memory backend's
/// clock is tokio's; etcd's decisions happen at a made-up instant): the local wall clock in
/// microseconds since the Unix epoch, or `above` (one above a counter or a revision that
/// outlives records), whichever is higher.
///
/// Every backend's tokens are on this one scale (the contract's "fencing token"): a job that
/// moves from one backend to another later in time keeps writing through its fences, as long
/// as the two clocks agree to within the time between the last write under the old backend
/// and the first under the new one.
///
/// ```
/// use lock_core::backend::rules::wall_clock_floor;
///
/// let floor = wall_clock_floor(7);
/// assert!(floor > 1_700_000_000_000_000, "microseconds since 1970: {floor}");
/// assert_eq!(wall_clock_floor(u64::MAX), u64::MAX);
/// ```
pub fn wall_clock_floor(above: u64) -> u64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    micros.max(above)
}

/// The fencing token of a fresh admission.
pub(super) fn next_fencing<T, H>(record: Option<&Record<T, H>>, floor: u64) -> u64 {
    last_fencing(record).saturating_add(1).max(floor)
}
