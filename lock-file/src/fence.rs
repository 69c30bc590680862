//! Fenced writes to a file: its content is replaced only when the writer's fencing token is
//! not below the highest one that wrote to it (see `lock_core::fence`).
//!
//! Beside the file `F` live two small files of the fence's own: `F.fence`, the highest
//! token that wrote to `F` (decimal), and `F.fence.lock`, which writers `flock` for the
//! whole check-and-write, so that no newer write comes between one writer's check and its
//! write. Under that lock a write is:
//!
//! 1. read `F.fence`; a token below it is refused (nothing is written);
//! 2. a higher token is written to `F.fence` first (a temporary file, `fsync`, `rename`,
//!    `fsync` of the directory): if the machine crashes right after, the fence already
//!    keeps older holders out, and this holder may write again;
//! 3. the content replaces `F` the same way (`F.fence-write`, `fsync`, `rename`, `fsync`
//!    of the directory): a reader sees the old content or the new one, never a mix.
//!
//! The content keeps the mode of the file it replaces (and its owner and group, when the
//! writer may set them: as root); a new file gets `0666` less the process's umask, as
//! `File::create` would make it. A path whose name ends as one of the fence's own files
//! (`.fence`, `.fence.lock`, `.fence.tmp`, `.fence-write`) is refused: writing there would
//! overwrite another file's fence.
//!
//! Every writer of `F` must go through [`write()`]: a plain write to `F` is not fenced.
//! Readers just read `F`. The lock file only serializes writers of one machine's file
//! system; on a network file system, `flock` is as good as the file system makes it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use lock_core::fence::{admits, stale};
use lock_core::{Error, ErrorKind, Fencing, Operation, Result};

/// The store's name in errors.
const NAME: &str = "file fence";

/// Replaces the content of the file at `path` with `contents` if `token` is not stale for
/// it, and records `token` as the file's highest. Blocking: from async code, call
/// [`write_async`] (or this inside `spawn_blocking`).
///
/// ```
/// use lock_core::{ErrorKind, Fencing};
///
/// let dir = tempfile::tempdir()?;
/// let report = dir.path().join("report.txt");
/// lock_file::fence::write(&report, Fencing(41), b"old holder")?;
/// lock_file::fence::write(&report, Fencing(42), b"new holder")?;
/// let refused = lock_file::fence::write(&report, Fencing(41), b"late!").unwrap_err();
/// assert_eq!(refused.kind(), ErrorKind::StaleToken);
/// assert_eq!(std::fs::read(&report)?, b"new holder");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`ErrorKind::StaleToken`] when a higher token wrote to the file (nothing was written);
/// [`ErrorKind::Corrupt`] when `F.fence` holds something else than a token;
/// [`ErrorKind::PermissionDenied`] or [`ErrorKind::Unavailable`] for the file system's
/// errors; [`ErrorKind::InvalidInput`] for a path with no file name, or one whose name ends
/// as the fence's own files do (`.fence`, `.fence.lock`, `.fence.tmp`, `.fence-write`).
pub fn write(path: &Path, token: Fencing, contents: &[u8]) -> Result<()> {
    let names = Names::of(path)?;
    let lock = open(&names.lock, false).map_err(|e| io_error(&names.lock, e))?;
    lock.lock().map_err(|e| io_error(&names.lock, e))?;
    let highest = read_token(&names.fence)?;
    if !admits(highest, token) {
        let resource = path.display().to_string();
        return Err(stale(NAME, &resource, token, highest.unwrap_or(token)));
    }
    if highest != Some(token) {
        replace(
            &names.fence,
            &names.fence_tmp,
            token.0.to_string().as_bytes(),
        )?;
    }
    replace_content(path, &names.content_tmp, contents)?;
    // The lock is released when `lock` is closed.
    drop(lock);
    Ok(())
}

/// [`write()`] on tokio's blocking pool.
///
/// # Errors
/// As for [`write()`].
///
/// # Cancel safety
/// Dropping the future does not stop the write: it runs to its end on the blocking pool.
pub async fn write_async(path: PathBuf, token: Fencing, contents: Vec<u8>) -> Result<()> {
    tokio::task::spawn_blocking(move || write(&path, token, &contents))
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                NAME,
                Operation::Fence,
                format!("the write's blocking task failed: {e}"),
            )
        })?
}

/// The highest token that wrote to the file at `path` through [`write()`], if any.
///
/// # Errors
/// As for [`write()`]'s reading of `F.fence`.
pub fn highest(path: &Path) -> Result<Option<Fencing>> {
    read_token(&Names::of(path)?.fence)
}

/// How the names of the fence's own files end (`F` + suffix).
const FENCE_SUFFIXES: [&str; 4] = [".fence", ".fence.lock", ".fence.tmp", ".fence-write"];

/// The fence's files beside `F`.
struct Names {
    fence: PathBuf,
    fence_tmp: PathBuf,
    lock: PathBuf,
    content_tmp: PathBuf,
}

impl Names {
    fn of(path: &Path) -> Result<Names> {
        let Some(name) = path.file_name() else {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                NAME,
                Operation::Fence,
                format!("{} names no file", path.display()),
            ));
        };
        if let Some(suffix) = FENCE_SUFFIXES
            .iter()
            .find(|suffix| name.as_encoded_bytes().ends_with(suffix.as_bytes()))
        {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                NAME,
                Operation::Fence,
                format!(
                    "{} ends in {suffix:?}, as the fence's own files beside a fenced file do: \
                     writing it would overwrite another file's fence; choose another name",
                    path.display()
                ),
            ));
        }
        let beside = |suffix: &str| {
            let mut n = name.to_owned();
            n.push(suffix);
            path.with_file_name(n)
        };
        Ok(Names {
            fence: beside(".fence"),
            fence_tmp: beside(".fence.tmp"),
            lock: beside(".fence.lock"),
            content_tmp: beside(".fence-write"),
        })
    }
}

/// Opens (creating, mode 0600) `path`, never through a symlink; `truncate` empties it.
fn open(path: &Path, truncate: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn read_token(path: &Path) -> Result<Option<Fencing>> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_string(&mut text).map_err(|e| io_error(path, e))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    text.trim().parse().map(|n| Some(Fencing(n))).map_err(|_| {
        Error::new(
            ErrorKind::Corrupt,
            NAME,
            Operation::Fence,
            format!(
                "{} holds no fencing token: it is the fence of the file beside it, written \
                 only by lock_file::fence::write",
                path.display()
            ),
        )
    })
}

/// Replaces `path` with `bytes` through `tmp`: written, synced, renamed over `path`, and
/// the directory synced, so that a crash leaves the old file or the new one.
fn replace(path: &Path, tmp: &Path, bytes: &[u8]) -> Result<()> {
    let written = open(tmp, true).and_then(|f| commit(f, bytes, tmp, path));
    written.map_err(|e| io_error(path, e))
}

/// [`replace`] for the content: the new file takes the mode of the one it replaces (and its
/// owner and group when this process may set them), or `0666` less the umask when there
/// is none, so that a report others read stays readable after a fenced write.
fn replace_content(path: &Path, tmp: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let before = match std::fs::metadata(path) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(path, e)),
    };
    let written = (|| {
        // A temporary an interrupted write left behind would keep its own mode: a new one.
        match std::fs::remove_file(tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(tmp)?;
        if let Some(before) = &before {
            // The owner first: chown clears the set-id bits the mode then puts back.
            let made = f.metadata()?;
            if (before.uid(), before.gid()) != (made.uid(), made.gid()) {
                // Only root (or the owner, for a group it is in) may: otherwise the new
                // file is the writer's, as any replacing write makes it.
                let _ = std::os::unix::fs::fchown(&f, Some(before.uid()), Some(before.gid()));
            }
            f.set_permissions(std::fs::Permissions::from_mode(before.mode() & 0o7777))?;
        }
        commit(f, bytes, tmp, path)
    })();
    written.map_err(|e| io_error(path, e))
}

/// Writes `bytes` to `f` (open at `tmp`), syncs it, renames it over `path` and syncs the
/// directory.
fn commit(mut f: File, bytes: &[u8], tmp: &Path, path: &Path) -> io::Result<()> {
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(tmp, path)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    File::open(dir.unwrap_or(Path::new(".")))?.sync_all()
}

fn io_error(path: &Path, e: io::Error) -> Error {
    let kind = match e.kind() {
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            ErrorKind::PermissionDenied
        }
        _ => ErrorKind::Unavailable,
    };
    Error::new(
        kind,
        NAME,
        Operation::Fence,
        format!("{}: {e}", path.display()),
    )
}

#[cfg(test)]
#[path = "fence_tests.rs"]
mod tests;
