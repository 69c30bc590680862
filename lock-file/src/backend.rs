//! The `LockBackend` implementation: one record file per key, every read-modify-write under
//! an exclusive `flock` of that file.

use std::fs::File;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lock_core::backend::codec::Hex;
use lock_core::backend::rules;
use lock_core::backend::storage::{Commit, Decide, Snapshot, Storage};
use lock_core::backend::{Capabilities, Grace, KeyPage, KeysRequest, Listing, UrlOptions};
use lock_core::{Error, ErrorKind, HolderInfo, Key, Operation, Result, Ttl};

use crate::clock::Clock;
use crate::names::file_name;
use crate::record::Record;
use crate::slots::{open, still_linked, Slots};
use crate::sweep::Sweeps;

/// Locks as files in one directory, for one machine.
///
/// See the crate docs for the guarantees and what breaks them (network file systems).
///
/// # Blocking
/// Each call does one short read-modify-write of one small file under `flock`, on the
/// calling task's thread: the file lock is held for microseconds (no holder of the *lock*
/// ever holds the *file* lock while it works), so handing each call to a blocking pool would
/// cost more than it saves. The file lock itself is never waited for on the thread: a
/// record another process holds (one stopped or frozen in the middle of its write) is tried
/// again on the runtime's timer, and after [`FileBackend::FILE_LOCK_WAIT`] the call ends
/// with a retry-safe [`ErrorKind::Unavailable`], so that a lock whose renewal waits behind
/// it still hears its lost signal on time.
#[derive(Debug, Clone)]
pub struct FileBackend {
    dir: PathBuf,
    grace: Option<Grace>,
    /// When this backend (and its clones) next sweeps the directory.
    sweeps: std::sync::Arc<Sweeps>,
}

impl FileBackend {
    /// The backend's name in errors and reports.
    pub const NAME: &'static str = "file";

    /// How long a call waits for the file lock of a record another process holds (for
    /// microseconds, unless it was stopped mid-write) before it fails, retry-safe.
    pub const FILE_LOCK_WAIT: Duration = Duration::from_secs(2);

    /// Locks in `dir`, created (owner-only, 0700) if missing.
    ///
    /// The directory must belong to the current user and must not be writable by group or
    /// others (as OpenSSH asks of `~/.ssh`): whoever can write it can delete or replace any
    /// record and so break anyone's lock. A directory another local user made in advance
    /// (say `/tmp/lockrun-1000`) is refused, never adopted.
    ///
    /// # Errors
    /// [`ErrorKind::PermissionDenied`] when the directory is someone else's or writable by
    /// others (the message says how to fix it), or cannot be created;
    /// [`ErrorKind::Config`] when it is not a directory; [`ErrorKind::Unavailable`] for other
    /// I/O errors.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        if !dir.exists() {
            std::fs::create_dir_all(&dir)
                .and_then(|()| {
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                })
                .map_err(|e| io_error(Operation::Connect, &dir, e))?;
        }
        if !dir.is_dir() {
            return Err(Error::new(
                ErrorKind::Config,
                Self::NAME,
                Operation::Connect,
                format!("{} is not a directory", dir.display()),
            ));
        }
        check_owner(&dir)?;
        Ok(FileBackend {
            dir,
            grace: None,
            sweeps: std::sync::Arc::default(),
        })
    }

    /// The backend a `file:` URL names: `file:///var/lock/myapp` (absolute),
    /// `file://locks` or `file:locks` (relative to the working directory); the one option is
    /// `grace=` (`file:///var/lock/myapp?grace=10m`). Creates the directory as
    /// [`FileBackend::new`] does.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for another scheme, no directory, an unknown option or a
    /// malformed grace; then as [`FileBackend::new`].
    pub fn from_url(url: &str) -> Result<Self> {
        let mut url = UrlOptions::parse(Self::NAME, url);
        let config = |why: &str| {
            Error::new(
                ErrorKind::Config,
                Self::NAME,
                Operation::Connect,
                why.to_owned(),
            )
        };
        if url.scheme() != "file" {
            return Err(config(
                "not a file URL: expected file:///DIR, file://DIR or file:DIR",
            ));
        }
        let grace = url.take_duration("grace")?;
        let base = url.finish()?;
        let path = base
            .strip_prefix("file://")
            .or_else(|| base.strip_prefix("file:"))
            .unwrap_or(&base);
        if path.is_empty() {
            return Err(config(
                "file: URL without a directory: write file:///var/lock/myapp or file://locks",
            ));
        }
        let backend = Self::new(path)?;
        match grace {
            Some(g) => backend.with_grace(g),
            None => Ok(backend),
        }
    }

    /// Keeps expired records readable as "late" for `grace` instead of each lock's own ttl.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](lock_core::ErrorKind::InvalidInput) over 365 days, before any
    /// I/O.
    pub fn with_grace(mut self, grace: Duration) -> Result<Self> {
        self.grace = Some(Grace::new(grace)?);
        Ok(self)
    }

    /// The lock directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes the record files nothing needs any more: a key released (or its hold past
    /// its grace, or its cooldown over) with no waiting writer, whose fencing token is below
    /// the wall clock's microseconds (which every later token is at least), and files that
    /// hold no record; a record another call holds is left for the next sweep, and a
    /// corrupt one for an operator. Returns how many it removed. The backend sweeps by
    /// itself, in the background, after a number of writes that grows with the directory
    /// (twice its files, at least 1,024) and at most every ten seconds, so that the
    /// directory holds about the keys in use however many different keys were ever taken;
    /// call this to tidy a directory nobody locks in.
    ///
    /// # Errors
    /// As [`FileBackend::new`] for a directory that cannot be read.
    ///
    /// # Cancel safety
    /// The sweep runs on tokio's blocking pool and finishes even if this call is
    /// dropped; each file it removes, it removes whole.
    pub async fn sweep(&self) -> Result<u64> {
        let dir = self.dir.clone();
        let swept = tokio::task::spawn_blocking(move || crate::sweep::sweep(&dir))
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unavailable,
                    Self::NAME,
                    Operation::ForceRelease,
                    format!("the sweep of {} stopped: {e}", self.dir.display()),
                )
            })?;
        let swept = swept.map_err(|e| io_error(Operation::ForceRelease, &self.dir, e))?;
        Ok(swept.removed)
    }

    /// The record file of `key`, for operators.
    pub fn record_path(&self, key: &Key) -> PathBuf {
        self.dir.join(file_name(key.as_str()))
    }
}

/// Refuses a lock directory that is not the current user's own, or that group or others
/// may write.
fn check_owner(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let op = Operation::Connect;
    let meta = std::fs::metadata(dir).map_err(|e| io_error(op, dir, e))?;
    let me = rustix::process::geteuid().as_raw();
    let refuse = |why: String| {
        Err(Error::new(
            ErrorKind::PermissionDenied,
            FileBackend::NAME,
            op,
            format!(
                "{}: {why}; anyone who can write the lock directory can delete records and \
                 break locks. Use a directory of your own with mode 0700 (`chmod 700 {0}`), or \
                 remove this one if you did not make it",
                dir.display()
            ),
        ))
    };
    if meta.uid() != me {
        return refuse(format!(
            "the lock directory belongs to uid {}, not to this process's uid {me}",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!(
            "the lock directory is writable by group or others (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// How a record's file lock is taken.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// To read it.
    Shared,
    /// To read and write it.
    Exclusive,
}

/// Takes `file`'s lock without ever blocking the thread: another process holds it for
/// microseconds, so it is tried again on the timer (from 100 µs, doubling up to 10 ms),
/// until `deadline` (the call's [`FileBackend::FILE_LOCK_WAIT`]).
async fn file_lock(
    file: &File,
    mode: Mode,
    path: &Path,
    op: Operation,
    deadline: tokio::time::Instant,
) -> Result<()> {
    let mut pause = Duration::from_micros(100);
    loop {
        let tried = match mode {
            Mode::Shared => file.try_lock_shared(),
            Mode::Exclusive => file.try_lock(),
        };
        match tried {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::Error(e)) => return Err(io_error(op, path, e)),
            Err(std::fs::TryLockError::WouldBlock) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::new(
                ErrorKind::Unavailable,
                FileBackend::NAME,
                op,
                format!(
                    "{}: another process has held the record's file lock for over {:?}, \
                     which lock-file never does (a process stopped or frozen while it \
                     wrote?); the call is safe to retry",
                    path.display(),
                    FileBackend::FILE_LOCK_WAIT
                ),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// Opens the record file at `path` (creating it when `writes`) and takes its file lock
/// (exclusive when `writes`, else shared), checking once it is taken that the file is still
/// the one at `path`: a sweep removes a record nothing needs any more while it holds the
/// lock (the `sweep` module), so a call that opened the file before waits for a file
/// nobody will look at again, and opens the path anew. `None`: there is no record (only
/// when not `writes`).
async fn locked(path: &Path, writes: bool, op: Operation) -> Result<Option<File>> {
    let mode = if writes {
        Mode::Exclusive
    } else {
        Mode::Shared
    };
    // One wait for the file lock, however many times the file is opened anew: a call
    // never waits longer than FILE_LOCK_WAIT in all.
    let deadline = tokio::time::Instant::now() + FileBackend::FILE_LOCK_WAIT;
    // Each turn means a sweep removed the file between this call's open and its lock; a
    // bound all the same, so that no call can loop for ever.
    for _ in 0..MOST_REOPENS {
        let file = match open(path, writes) {
            Ok(f) => f,
            Err(e) if !writes && e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(op, path, e)),
        };
        file_lock(&file, mode, path, op, deadline).await?;
        if still_linked(&file).map_err(|e| io_error(op, path, e))? {
            return Ok(Some(file));
        }
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        FileBackend::NAME,
        op,
        format!(
            "{}: the record was removed {MOST_REOPENS} times between opening it and locking \
             it; the call is safe to retry",
            path.display()
        ),
    ))
}

/// How often [`locked`] opens a record again that was removed while it waited for it.
const MOST_REOPENS: usize = 64;

/// The current record of `key`'s file, checked to be `key`'s.
fn current(slots: &Slots, path: &Path, key: &Key, op: Operation) -> Result<Option<Record>> {
    match slots.current().map_err(|why| corrupt(op, path, &why))? {
        Some(r) if r.key != key.as_str() => Err(corrupt(
            op,
            path,
            "the record belongs to another key (a hash collision or a copied file)",
        )),
        other => Ok(other.cloned()),
    }
}

fn corrupt(op: Operation, path: &Path, why: &str) -> Error {
    Error::new(
        ErrorKind::Corrupt,
        FileBackend::NAME,
        op,
        format!(
            "{}: {why}; inspect it, then break it with force_release (`lockrun release --force`)",
            path.display()
        ),
    )
}

fn io_error(op: Operation, path: &Path, e: io::Error) -> Error {
    let (kind, hint) = match e.raw_os_error() {
        Some(libc::ELOOP) => (
            ErrorKind::Corrupt,
            "the record is a symlink, which lock-file never follows",
        ),
        _ => match e.kind() {
            io::ErrorKind::InvalidData => (
                ErrorKind::Corrupt,
                "the file was not written by lock-file: inspect it, then remove it",
            ),
            io::ErrorKind::InvalidInput => (
                ErrorKind::InvalidInput,
                "one lock file keeps all of a key's holds, and this one would be too big: \
                 fewer shared holds at once, or shorter holder metadata",
            ),
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => (
                ErrorKind::PermissionDenied,
                "check the lock directory's owner and mode",
            ),
            _ => (
                ErrorKind::Unavailable,
                "check that the lock directory exists and is writable",
            ),
        },
    };
    Error::new(
        kind,
        FileBackend::NAME,
        op,
        format!("{}: {e}; {hint}", path.display()),
    )
    .with_source(e)
}

impl Storage for FileBackend {
    /// The owner token's hex.
    type Codec = Hex;
    const NAME: &'static str = FileBackend::NAME;

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none()
            .cross_process(true)
            .shared(true)
            .holds_per_key(crate::record::HOLDS_PER_KEY)
            .listing(Listing::InKeyOrder)
    }

    /// Walks the directory on tokio's blocking pool (see `list.rs`).
    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        let dir = self.dir.clone();
        let owned = (req.prefix.to_owned(), req.cursor.cloned(), req.limit);
        let page = tokio::task::spawn_blocking(move || {
            let (prefix, cursor, limit) = owned;
            let req = KeysRequest {
                prefix: &prefix,
                cursor: cursor.as_ref(),
                limit,
            };
            crate::list::keys(&dir, &req)
        })
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                Self::NAME,
                Operation::List,
                format!("the listing of {} stopped: {e}", self.dir.display()),
            )
        })?;
        page.map_err(|e| io_error(Operation::List, &self.dir, e))
    }

    fn grace(&self, ttl: Ttl) -> Grace {
        Grace::or_ttl(self.grace, ttl)
    }

    /// Opens the record of `key` and locks it (exclusively; shared for an inspection, which
    /// creates no file), lets the step decide on it with the clock read after the file lock
    /// was taken (the record's clock: see the `clock` module), writes what it decided.
    ///
    /// A forced release breaks a record that cannot be read rather than refusing it, and
    /// always leaves a readable free record, whose fencing token is at least the clock's
    /// floor.
    async fn transact(
        &self,
        key: &Key,
        op: Operation,
        decide: &mut Decide<'_, String, HolderInfo>,
    ) -> Result<Commit> {
        let path = self.record_path(key);
        let writes = op != Operation::Inspect;
        let Some(file) = locked(&path, writes, op).await? else {
            decide(Snapshot {
                record: None,
                clock: Clock::read(None).rules(),
                fencing_floor: 0,
            })?;
            return Ok(Commit::Done);
        };
        let slots = Slots::read(&file).map_err(|e| io_error(op, &path, e))?;
        let before = match op {
            // A corrupt record is exactly what an operator breaks: replaced, not refused.
            Operation::ForceRelease => slots
                .current()
                .ok()
                .flatten()
                .filter(|r| r.key == key.as_str())
                .cloned(),
            _ => current(&slots, &path, key, op)?,
        };
        let clock = Clock::read(before.as_ref().and_then(|r| r.clock.as_ref()));
        let change = decide(Snapshot {
            record: before.map(Record::into_stored).as_ref(),
            clock: clock.rules(),
            // Never below the wall clock in microseconds: fencing keeps growing even if the
            // file is deleted (this assumes the wall clock does not go backwards).
            fencing_floor: clock.micros,
        })?;
        let write = match (change.write, op) {
            (Some(record), _) => record,
            // Without a readable record, a free one whose fencing token is the clock's floor.
            (None, Operation::ForceRelease) => rules::Record::new(clock.micros, rules::State::Free),
            (None, _) => return Ok(Commit::Done),
        };
        slots
            .write_next(
                &file,
                Record::from_stored(key.as_str(), write, clock.anchor()),
            )
            .map_err(|e| io_error(op, &path, e))?;
        self.sweeps.tick(&self.dir);
        if op == Operation::ForceRelease {
            tracing::info!(path = %path.display(), "lock broken by force_release");
        }
        Ok(Commit::Done)
    }
}

#[cfg(test)]
mod tests;
