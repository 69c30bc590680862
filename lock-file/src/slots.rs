//! A record file on disk: its two slots, read with one `pread` each and written turn
//! about, so that a write cut at any byte leaves the previous record standing (see the
//! `record` module for the line format).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use crate::record::{Record, SLOT};

/// Opens a record file (creating it, mode 0600, when `create`), never through a symlink.
pub(crate) fn open(path: &Path, create: bool) -> io::Result<File> {
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

/// Whether `file` is still linked in the directory: a file that a sweep removed while a
/// call waited for its lock is no record of the key any more. Lock-file only ever removes
/// record files, never renames one onto another's path, so a file with a link is the one
/// at its path; one `fstat`, no path lookup, on every call.
pub(crate) fn still_linked(file: &File) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    Ok(file.metadata()?.nlink() > 0)
}

/// The two slots of a record file, decoded (see the `record` module).
pub(crate) struct Slots([std::result::Result<Option<Record>, String>; 2]);

impl Slots {
    pub(crate) fn read(file: &File) -> io::Result<Self> {
        let slot = |i: usize| read_slot(file, i).map(|bytes| Record::decode(&bytes));
        Ok(Slots([slot(0)?, slot(1)?]))
    }

    /// The current record: the valid slot with the highest `seq`. A file's first write goes
    /// to slot 1, so a torn slot 1 over an empty slot 0 is a first write that never
    /// finished: no record. Anything else unreadable with no valid slot beside it is
    /// corrupt.
    pub(crate) fn current(&self) -> std::result::Result<Option<&Record>, String> {
        match (&self.0[0], &self.0[1]) {
            (Ok(a), Ok(b)) => Ok(match (a, b) {
                (Some(a), Some(b)) => Some(if b.seq > a.seq { b } else { a }),
                (a, b) => a.as_ref().or(b.as_ref()),
            }),
            (Ok(Some(a)), Err(_)) => Ok(Some(a)),
            (Err(_), Ok(Some(b))) => Ok(Some(b)),
            (Ok(None), Err(_)) => Ok(None),
            (Err(e), _) => Err(e.clone()),
        }
    }

    /// Writes `record` into the slot that does not hold the newest valid record (whatever
    /// its key), with `seq` one above it: a torn write leaves that record standing.
    pub(crate) fn write_next(&self, file: &File, record: Record) -> io::Result<()> {
        let (offset, line) = self.next(record)?;
        file.write_all_at(&line, offset)
    }

    /// Where the next record goes, and its line.
    fn next(&self, mut record: Record) -> io::Result<(u64, Vec<u8>)> {
        let newest = self
            .0
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| Some((i, slot.as_ref().ok()?.as_ref()?.seq)))
            .max_by_key(|&(_, seq)| seq);
        let (slot, seq) = match newest {
            None => (1, 1),
            Some((i, seq)) => (
                1 - i,
                // A wrapped counter would leave the old record the newest for ever, every
                // write after it lost. lock-file counts one per write from 1: no file it
                // wrote gets here.
                seq.checked_add(1).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the record's write counter (seq) is at its maximum, which lock-file \
                         never writes",
                    )
                })?,
            ),
        };
        record.v = record.version();
        record.seq = seq;
        let line = record.encode();
        if line.len() > SLOT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a record of {} bytes does not fit a slot of {SLOT} bytes",
                    line.len()
                ),
            ));
        }
        Ok(((slot * SLOT) as u64, line))
    }
}

/// Reads slot `i`: one `pread` of 1 KiB (a record with a short holder fits in a few hundred
/// bytes), or of the whole slot when its line is longer.
fn read_slot(file: &File, i: usize) -> io::Result<Vec<u8>> {
    const FIRST: usize = 1024;
    let offset = (i * SLOT) as u64;
    let mut bytes = vec![0u8; FIRST];
    let n = file.read_at(&mut bytes, offset)?;
    if n == FIRST && !bytes.contains(&b'\n') {
        bytes.resize(SLOT, 0);
        let mut len = n;
        while len < SLOT {
            let more = file.read_at(&mut bytes[len..], offset + len as u64)?;
            if more == 0 {
                break;
            }
            len += more;
        }
        bytes.truncate(len);
    } else {
        bytes.truncate(n);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{State, VERSION};
    use lock_core::HolderInfo;

    fn record(key: &str, fencing: u64) -> Record {
        Record {
            v: VERSION,
            seq: 0,
            key: key.to_owned(),
            fencing,
            clock: None,
            writer: None,
            state: State::Held {
                token: "ab".repeat(16),
                holder: HolderInfo::current()
                    .with_metadata("m".repeat(4096))
                    .unwrap(),
                holds: 1,
                expires_ms: 1,
                forget_ms: 2,
            },
        }
    }

    /// What SIGKILL can leave on a kernel that stops a write between pages: every prefix of
    /// the new record's line, over whatever the file held. The previous record must stand.
    #[test]
    fn a_write_cut_after_any_byte_leaves_the_previous_record() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("k");
        let file = open(&path, true).unwrap();
        let mut writes = 0;
        for fencing in 1..=3 {
            let slots = Slots::read(&file).unwrap();
            let previous = slots.current().unwrap().cloned();
            let (offset, line) = slots.next(record("k", fencing)).unwrap();
            assert!(line.len() > 4096, "the record spans a page");
            for cut in [0, 1, 100, 4095, 4096, 4097, line.len() - 2, line.len() - 1] {
                // A fresh copy of the file each time, the write cut after `cut` bytes.
                let copy = tmp.path().join(format!("copy-{fencing}-{cut}"));
                std::fs::copy(&path, &copy).unwrap();
                let torn = open(&copy, true).unwrap();
                torn.write_all_at(&line[..cut], offset).unwrap();
                let after = Slots::read(&torn).unwrap();
                let current = after.current().unwrap_or_else(|e| {
                    panic!("write {fencing} cut at {cut} of {}: {e}", line.len())
                });
                // The previous record, or (when only bytes it already had are missing) the
                // new one: never a third thing.
                let seen = current.map(|r| r.fencing);
                assert!(
                    seen == previous.as_ref().map(|r| r.fencing)
                        || (cut + 2 > line.len() && seen == Some(fencing)),
                    "write {fencing} cut at {cut}: {seen:?}"
                );
            }
            slots.write_next(&file, record("k", fencing)).unwrap();
            writes += 1;
            let now = Slots::read(&file).unwrap();
            assert_eq!(now.current().unwrap().map(|r| r.fencing), Some(fencing));
        }
        assert_eq!(writes, 3);
    }

    #[test]
    fn a_record_whose_seq_is_at_its_maximum_is_refused_not_wrapped() {
        let mut newest = record("k", 1);
        newest.seq = u64::MAX;
        let slots = Slots([Ok(Some(newest)), Ok(None)]);
        let err = slots.next(record("k", 2)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
