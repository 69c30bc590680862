//! The `LockBackend` implementation: one record file per key, every read-modify-write under
//! an exclusive `flock` of that file.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use lock_core::{
    Busy, Capabilities, Error, ErrorKind, Fencing, Grace, Key, LockBackend, LockState,
    ObtainOutcome, ObtainRequest, Operation, ProlongOutcome, ProlongRequest, ReleaseOutcome,
    ReleaseRequest, Result, Ttl,
};

use crate::names::file_name;
use crate::record::{Phase, Record, State, VERSION};

/// Locks as files in one directory, for one machine.
///
/// See the crate docs for the guarantees and what breaks them (network file systems).
///
/// # Blocking
/// Each call does one short read-modify-write of one small file under `flock`, on the
/// calling task's thread: the file lock is held for microseconds (no holder of the *lock*
/// ever holds the *file* lock while it works), so handing each call to a blocking pool would
/// cost more than it saves.
#[derive(Debug, Clone)]
pub struct FileBackend {
    dir: PathBuf,
    grace: Option<Grace>,
}

impl FileBackend {
    /// The backend's name in errors and reports.
    pub const NAME: &'static str = "file";

    /// Locks in `dir`, created (owner-only, 0700) if missing.
    ///
    /// # Errors
    /// [`ErrorKind::PermissionDenied`] or [`ErrorKind::Unavailable`] when the directory cannot
    /// be created or is not a directory.
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
        Ok(FileBackend { dir, grace: None })
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

    /// The record file of `key`, for operators.
    pub fn record_path(&self, key: &Key) -> PathBuf {
        self.dir.join(file_name(key.as_str()))
    }

    fn grace_ms(&self, ttl: Ttl) -> u64 {
        Grace::or_ttl(self.grace, ttl).as_millis()
    }

    /// Opens and exclusively locks the record of `key`, lets `decide` change it, writes it
    /// back if it changed. `decide` gets `None` for a missing or free-of-content file.
    fn modify<T>(
        &self,
        key: &Key,
        op: Operation,
        decide: impl FnOnce(&mut Option<Record>, Clock) -> T,
    ) -> Result<T> {
        let path = self.record_path(key);
        let mut file = open(&path, true).map_err(|e| io_error(op, &path, e))?;
        file.lock().map_err(|e| io_error(op, &path, e))?;
        let (before, old_len) = read_record(&mut file, &path, key, op)?;
        let mut record = before.clone();
        let out = decide(&mut record, Clock::now());
        if record != before {
            if let Some(record) = &record {
                write_record(&file, record, old_len).map_err(|e| io_error(op, &path, e))?;
            }
        }
        Ok(out)
    }

    fn new_record(key: &Key, previous: Option<&Record>, clock: Clock, state: State) -> Record {
        // Never below the wall clock in microseconds: fencing keeps growing even if the file
        // is deleted (this assumes the wall clock does not go backwards).
        let fencing = previous
            .map(|r| r.fencing + 1)
            .unwrap_or(0)
            .max(clock.micros);
        Record {
            v: VERSION,
            key: key.as_str().to_owned(),
            fencing,
            state,
        }
    }
}

/// The local wall clock, read once per operation.
#[derive(Debug, Clone, Copy)]
struct Clock {
    ms: u64,
    micros: u64,
}

impl Clock {
    fn now() -> Self {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Clock {
            ms: u64::try_from(since.as_millis()).unwrap_or(u64::MAX),
            micros: u64::try_from(since.as_micros()).unwrap_or(u64::MAX),
        }
    }
}

fn open(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .truncate(false)
        .mode(0o600)
        // A record path that is a symlink is refused (ELOOP), never followed.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Reads the whole file (usually one `pread`) and returns its record and length.
fn read_all(file: &File) -> io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; 8192];
    let mut len = 0;
    loop {
        let n = file.read_at(&mut bytes[len..], len as u64)?;
        len += n;
        if n == 0 || len < bytes.len() {
            break;
        }
        bytes.resize(bytes.len() * 2, 0);
    }
    bytes.truncate(len);
    Ok(bytes)
}

fn read_record(
    file: &mut File,
    path: &Path,
    key: &Key,
    op: Operation,
) -> Result<(Option<Record>, usize)> {
    let bytes = read_all(file).map_err(|e| io_error(op, path, e))?;
    let record = Record::decode(&bytes).map_err(|why| corrupt(op, path, &why))?;
    match record {
        Some(r) if r.key != key.as_str() => Err(corrupt(
            op,
            path,
            "the record belongs to another key (a hash collision or a copied file)",
        )),
        other => Ok((other, bytes.len())),
    }
}

/// One `pwrite` of the whole record. A shorter record is padded with spaces up to the old
/// length instead of truncating the file: no second syscall, and no moment at which a killed
/// writer could leave a file that is neither the old record nor the new one.
fn write_record(file: &File, record: &Record, old_len: usize) -> io::Result<()> {
    let mut line = record.encode();
    if line.len() < old_len {
        line.pop();
        line.resize(old_len - 1, b' ');
        line.push(b'\n');
    }
    file.write_all_at(&line, 0)
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

fn held_state(r: &Record) -> Option<(&lock_core::HolderInfo, u32, u64)> {
    match &r.state {
        State::Held {
            holder,
            holds,
            expires_ms,
            ..
        } => Some((holder, *holds, *expires_ms)),
        _ => None,
    }
}

#[async_trait]
impl LockBackend for FileBackend {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none().cross_process(true)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let grace = self.grace_ms(req.ttl);
        self.modify(req.key, Operation::Obtain, |record, clock| {
            let expires_ms = clock.ms + req.ttl.as_millis();
            let phase = record
                .as_ref()
                .map_or(Phase::Free, |r| r.phase(clock.ms, Some(req.token)));
            match (phase, record.as_mut()) {
                (Phase::Cooling { left_ms }, _) => ObtainOutcome::Busy(Busy {
                    holder: None,
                    remaining: Duration::from_millis(left_ms),
                }),
                (Phase::Live { ours: true }, Some(r)) => {
                    let mut holds_now = 0;
                    if let State::Held {
                        holds,
                        expires_ms: e,
                        forget_ms,
                        ..
                    } = &mut r.state
                    {
                        *holds += 1;
                        *e = expires_ms;
                        *forget_ms = expires_ms + grace;
                        holds_now = *holds;
                    }
                    ObtainOutcome::Reacquired { holds: holds_now }
                }
                (Phase::Live { ours: false }, Some(r)) => {
                    let (holder, _, e) =
                        held_state(r).map_or((None, 0, 0), |(h, n, e)| (Some(h.clone()), n, e));
                    ObtainOutcome::Busy(Busy {
                        holder,
                        remaining: Duration::from_millis(e.saturating_sub(clock.ms)),
                    })
                }
                _ => {
                    let state = State::Held {
                        token: req.token.to_hex(),
                        holder: req.holder.clone(),
                        holds: 1,
                        expires_ms,
                        forget_ms: expires_ms + grace,
                    };
                    let fresh = Self::new_record(req.key, record.as_ref(), clock, state);
                    let fencing = Fencing(fresh.fencing);
                    *record = Some(fresh);
                    ObtainOutcome::Acquired {
                        fencing,
                        ttl: req.ttl,
                    }
                }
            }
        })
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        let grace = self.grace_ms(req.ttl);
        self.modify(req.key, Operation::Prolongate, |record, clock| {
            let Some(r) = record.as_mut() else {
                return ProlongOutcome::Lost;
            };
            let outcome = match r.phase(clock.ms, Some(req.token)) {
                Phase::Live { ours: true } => ProlongOutcome::Prolonged,
                Phase::Expired { ours: true } => ProlongOutcome::ProlongedLate,
                _ => return ProlongOutcome::Lost,
            };
            if let State::Held {
                expires_ms,
                forget_ms,
                ..
            } = &mut r.state
            {
                *expires_ms = clock.ms + req.ttl.as_millis();
                *forget_ms = *expires_ms + grace;
            }
            outcome
        })
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        self.modify(req.key, Operation::Release, |record, clock| {
            let Some(r) = record.as_mut() else {
                return ReleaseOutcome::Lost;
            };
            let outcome = match (r.phase(clock.ms, Some(req.token)), &mut r.state) {
                (Phase::Live { ours: true }, State::Held { holds, .. }) if *holds > 1 => {
                    *holds -= 1;
                    return ReleaseOutcome::Decremented { holds: *holds };
                }
                (Phase::Live { ours: true }, _) => ReleaseOutcome::Released,
                (Phase::Expired { ours: true }, _) => ReleaseOutcome::ReleasedLate,
                _ => return ReleaseOutcome::Lost,
            };
            r.state = match req.delay_after {
                Some(d) => State::Cooling {
                    until_ms: clock.ms + d.as_millis(),
                },
                None => State::Free,
            };
            outcome
        })
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        let path = self.record_path(key);
        let op = Operation::Inspect;
        let mut file = match open(&path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LockState::Free),
            Err(e) => return Err(io_error(op, &path, e)),
        };
        file.lock_shared().map_err(|e| io_error(op, &path, e))?;
        let (record, _) = read_record(&mut file, &path, key, op)?;
        Ok(record.map_or(LockState::Free, |r| state_of(&r, Clock::now())))
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        let path = self.record_path(key);
        let op = Operation::ForceRelease;
        let file = open(&path, true).map_err(|e| io_error(op, &path, e))?;
        file.lock().map_err(|e| io_error(op, &path, e))?;
        let bytes = read_all(&file).map_err(|e| io_error(op, &path, e))?;
        // A corrupt record is exactly what an operator breaks: it is replaced, not refused.
        let previous = Record::decode(&bytes)
            .ok()
            .flatten()
            .filter(|r| r.key == key.as_str());
        let clock = Clock::now();
        let broken = previous
            .as_ref()
            .map_or(LockState::Free, |r| state_of(r, clock));
        let fresh = Self::new_record(key, previous.as_ref(), clock, State::Free);
        write_record(&file, &fresh, bytes.len()).map_err(|e| io_error(op, &path, e))?;
        tracing::info!(path = %path.display(), "lock broken by force_release");
        Ok(broken)
    }
}

fn state_of(r: &Record, clock: Clock) -> LockState {
    match (r.phase(clock.ms, None), &r.state) {
        (Phase::Cooling { left_ms }, _) => LockState::Cooling {
            remaining: Duration::from_millis(left_ms),
        },
        (
            Phase::Live { .. },
            State::Held {
                holder,
                holds,
                expires_ms,
                ..
            },
        ) => LockState::Held {
            holder: holder.clone(),
            fencing: Fencing(r.fencing),
            remaining: Duration::from_millis(expires_ms.saturating_sub(clock.ms)),
            holds: *holds,
        },
        _ => LockState::Free,
    }
}
