//! The clock a record's times are on: the wall clock, carried on by `CLOCK_BOOTTIME`.
//!
//! A record's times (`expires_ms`, `forget_ms`, `until_ms`) are milliseconds on the
//! *record's clock*. Judged by the wall clock alone, a step of it (`date -s`, an NTP
//! `makestep`) would end every lock early or late at once, while the holders, counting on a
//! clock that does not step, still believed they held. `CLOCK_BOOTTIME` never steps and,
//! unlike `CLOCK_MONOTONIC`, keeps counting while the machine is suspended, as the client
//! layer's clock does; but it restarts at every boot. So each record carries an
//! [`Anchor`]: the boot it was written in, and what `CLOCK_BOOTTIME` and the record's clock
//! read at that write. Read in the same boot, the record's clock is `anchor.ms` plus the
//! boot time gone since; read in another boot (every holder of the old boot is dead), or
//! from a record without an anchor (written by an older lock-file), it is the wall clock
//! again, so a cooldown still lasts across a reboot.
//!
//! Fencing tokens are floored at the wall clock in microseconds whatever the anchor: they
//! must keep growing across reboots and a deleted file.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::backend::rules;
use serde::{Deserialize, Serialize};

/// What the clocks read when a record was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Anchor {
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`).
    pub(crate) boot: String,
    /// `CLOCK_BOOTTIME` in milliseconds.
    pub(crate) boot_ms: u64,
    /// The record's clock in milliseconds.
    pub(crate) ms: u64,
}

/// The clocks, read once per operation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    /// The record's clock, in milliseconds.
    pub(crate) ms: u64,
    /// The wall clock in microseconds: the fencing floor.
    pub(crate) micros: u64,
    /// This boot's id and `CLOCK_BOOTTIME` in milliseconds, where there is one.
    boot: Option<(&'static str, u64)>,
}

impl Clock {
    /// The clocks now, for a record written with `anchor`.
    pub(crate) fn read(anchor: Option<&Anchor>) -> Self {
        let wall = wall();
        let wall_ms = u64::try_from(wall.as_millis()).unwrap_or(u64::MAX);
        let micros = u64::try_from(wall.as_micros()).unwrap_or(u64::MAX);
        let boot = boot();
        let ms = match (anchor, boot) {
            (Some(anchor), Some((id, boot_ms))) if anchor.boot == id => anchor
                .ms
                .saturating_add(boot_ms.saturating_sub(anchor.boot_ms)),
            _ => wall_ms,
        };
        Clock { ms, micros, boot }
    }

    /// The rules' clock: milliseconds of the record's clock.
    pub(crate) fn rules(self) -> rules::Clock {
        rules::Clock::millis(self.ms)
    }

    /// The anchor of a record written now.
    pub(crate) fn anchor(self) -> Option<Anchor> {
        let (id, boot_ms) = self.boot?;
        Some(Anchor {
            boot: id.to_owned(),
            boot_ms,
            ms: self.ms,
        })
    }
}

fn wall() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        + test_hook::wall_shift()
}

/// This boot's id and `CLOCK_BOOTTIME` in milliseconds; `None` off Linux, or where the boot
/// id cannot be read (then records carry no anchor and the wall clock is the record's).
fn boot() -> Option<(&'static str, u64)> {
    let id = test_hook::boot_id().or_else(boot_id)?;
    let ms = u64::try_from((boot_time()? + test_hook::suspend()).as_millis()).ok()?;
    Some((id, ms))
}

fn boot_id() -> Option<&'static str> {
    static ID: OnceLock<Option<String>> = OnceLock::new();
    ID.get_or_init(|| {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = id.trim();
        (!id.is_empty()).then(|| id.to_owned())
    })
    .as_deref()
}

#[cfg(target_os = "linux")]
fn boot_time() -> Option<Duration> {
    use rustix::time::{clock_gettime, ClockId};
    let t = clock_gettime(ClockId::Boottime);
    Some(Duration::new(
        u64::try_from(t.tv_sec).ok()?,
        u32::try_from(t.tv_nsec).ok()?,
    ))
}

#[cfg(not(target_os = "linux"))]
fn boot_time() -> Option<Duration> {
    None
}

/// Clock events the unit tests pretend happened, on their own thread only.
#[cfg(test)]
pub(crate) mod test_hook {
    use std::cell::Cell;
    use std::time::Duration;

    thread_local! {
        static WALL: Cell<Duration> = const { Cell::new(Duration::ZERO) };
        static SUSPEND: Cell<Duration> = const { Cell::new(Duration::ZERO) };
        static BOOT: Cell<Option<&'static str>> = const { Cell::new(None) };
    }

    pub(crate) fn wall_shift() -> Duration {
        WALL.with(Cell::get)
    }
    pub(crate) fn suspend() -> Duration {
        SUSPEND.with(Cell::get)
    }
    pub(crate) fn boot_id() -> Option<&'static str> {
        BOOT.with(Cell::get)
    }

    /// Steps the wall clock forward by `d`.
    pub(crate) fn step_wall(d: Duration) {
        WALL.with(|w| w.set(w.get() + d));
    }
    /// Pretends the machine slept for `d` (boot time runs on, the wall clock too).
    pub(crate) fn sleep(d: Duration) {
        SUSPEND.with(|s| s.set(s.get() + d));
        step_wall(d);
    }
    /// Pretends the machine rebooted: another boot id.
    pub(crate) fn reboot(id: &'static str) {
        BOOT.with(|b| b.set(Some(id)));
    }
}

#[cfg(not(test))]
mod test_hook {
    use std::time::Duration;

    #[inline]
    pub(super) fn wall_shift() -> Duration {
        Duration::ZERO
    }
    #[inline]
    pub(super) fn suspend() -> Duration {
        Duration::ZERO
    }
    #[inline]
    pub(super) fn boot_id() -> Option<&'static str> {
        None
    }
}
