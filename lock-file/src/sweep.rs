//! Removing the record files nothing needs any more, so that a lock directory holds about
//! the keys in use however many different keys were ever taken (the contract's bounded
//! storage).
//!
//! A file goes when its record is forgotten by the rules (free: released, its hold past its
//! grace or its cooldown over, and no writer's marker lives) and its fencing token is below
//! the wall clock's microseconds, which every later token of the key is at least (the
//! fencing floor): tokens keep growing without the file, as long as the wall clock does not
//! go backwards. A file with no record (made by a call that wrote nothing, such as the
//! release of a key nobody held) goes too. Each is removed under its exclusive file lock,
//! taken without waiting (a file another call holds is left for the next sweep), and a call
//! that opened the file before and waits for that lock finds, once it has it, that the file
//! is no longer the one at its path, and opens the path anew (`backend::locked`): two
//! callers never lock two different files of one key.
//!
//! Removal happens in sweeps, not at each release: creating and unlinking a file on every
//! obtain and release made a lock cycle about seven times slower. A backend sweeps in the
//! background (tokio's blocking pool), one sweep at a time, after a number of its writes
//! that grows with the directory and at most every ten seconds, so that a sweep's cost per
//! call stays small.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::backend::rules;
use lock_core::HolderInfo;

use crate::clock::Clock;
use crate::names::file_name;
use crate::slots::{open, still_linked, Slots};

/// The fewest writes between two background sweeps.
const SWEEP_EVERY: u64 = 1024;

/// The shortest time between two background sweeps: a busy backend sweeps no more often,
/// however many writes it makes (a sweep that removes the files of hot keys only makes the
/// next obtains create them again).
const SWEEP_PERIOD: Duration = Duration::from_secs(10);

/// When a backend (and its clones) next sweeps its directory.
#[derive(Debug)]
pub(crate) struct Sweeps {
    /// Writes since the last sweep began.
    writes: AtomicU64,
    /// The writes after which the next sweep begins: twice the files the last one saw, at
    /// least [`SWEEP_EVERY`].
    next: AtomicU64,
    /// A sweep is under way.
    running: AtomicBool,
    /// When the last sweep began.
    last: Mutex<Option<Instant>>,
}

impl Default for Sweeps {
    fn default() -> Self {
        Sweeps {
            writes: AtomicU64::new(0),
            next: AtomicU64::new(SWEEP_EVERY),
            running: AtomicBool::new(false),
            last: Mutex::new(None),
        }
    }
}

impl Sweeps {
    /// Counts a write; every so often (enough writes since the last sweep, and
    /// [`SWEEP_PERIOD`]) starts a sweep of `dir` in the background, when a tokio runtime
    /// runs this call and no sweep is under way.
    pub(crate) fn tick(self: &Arc<Self>, dir: &Path) {
        let writes = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        if writes < self.next.load(Ordering::Relaxed) {
            return;
        }
        {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| at.elapsed() < SWEEP_PERIOD)
                || self.running.swap(true, Ordering::AcqRel)
            {
                return;
            }
            *last = Some(Instant::now());
        }
        self.writes.store(0, Ordering::Relaxed);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.running.store(false, Ordering::Release);
            return;
        };
        let (sweeps, dir) = (Arc::clone(self), dir.to_owned());
        runtime.spawn_blocking(move || {
            match sweep(&dir) {
                Ok(swept) => {
                    sweeps
                        .next
                        .store((swept.seen * 2).max(SWEEP_EVERY), Ordering::Relaxed);
                    if swept.removed > 0 {
                        tracing::debug!(
                            dir = %dir.display(),
                            removed = swept.removed,
                            seen = swept.seen,
                            "swept the lock directory"
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), "could not sweep the lock directory: {e}");
                }
            }
            sweeps.running.store(false, Ordering::Release);
        });
    }
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Record files it looked at.
    pub(crate) seen: u64,
    /// Those it removed.
    pub(crate) removed: u64,
}

/// Removes every record file of `dir` that nothing needs any more (see the module docs).
/// Blocking: run it off the runtime's threads.
pub(crate) fn sweep(dir: &Path) -> io::Result<Swept> {
    let mut swept = Swept {
        seen: 0,
        removed: 0,
    };
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with("k-") || name.starts_with("h-")) || !name.ends_with(".lock") {
            continue;
        }
        swept.seen += 1;
        if remove_if_forgotten(&entry.path(), name) {
            swept.removed += 1;
        }
    }
    Ok(swept)
}

/// Removes the record file at `path` (named `name`) if nothing needs it any more and no
/// other call holds it; whether it did.
fn remove_if_forgotten(path: &Path, name: &str) -> bool {
    let Ok(file) = open(path, false) else {
        return false;
    };
    // Held by a call at work (for microseconds): the next sweep sees it.
    if file.try_lock().is_err() || !still_linked(&file).unwrap_or(false) {
        return false;
    }
    let Ok(slots) = Slots::read(&file) else {
        return false;
    };
    let forgotten = match slots.current() {
        // Made by a call that wrote nothing.
        Ok(None) => true,
        // Another key's record (a copied file) stays for an operator to look at.
        Ok(Some(record)) if file_name(&record.key) != name => false,
        Ok(Some(record)) => {
            let clock = Clock::read(record.clock.as_ref());
            forgettable(&record.clone().into_stored(), clock)
        }
        // Corrupt: for an operator (`force_release` rewrites it).
        Err(_) => false,
    };
    // Removed while its lock is held: see the module docs.
    forgotten && std::fs::remove_file(path).is_ok()
}

/// Whether a record keeps nothing the key's next obtain needs.
fn forgettable(record: &rules::Record<String, HolderInfo>, clock: Clock) -> bool {
    rules::forgotten(record, clock.rules()) && record.fencing < clock.micros
}
