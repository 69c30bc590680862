//! Listing the directory's keys: every record file's name read back as its key (a hashed
//! name's key read from inside the record), the page's smallest kept while the directory
//! is walked.

use std::io;
use std::path::Path;

use lock_core::backend::listing::Smallest;
use lock_core::backend::{KeyPage, KeysRequest};

use crate::names::key_of;
use crate::slots::{open, Slots};

/// One page of the keys of `dir`'s record files. Blocking: run it off the runtime's
/// threads. O(files) in time per page, O(limit) in memory; it takes no file lock (a record
/// being written is read from its other slot, see `slots`).
pub(crate) fn keys(dir: &Path, req: &KeysRequest<'_>) -> io::Result<KeyPage> {
    let mut page = Smallest::new(req);
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.ends_with(".lock") {
            continue;
        }
        if let Some(key) = key_of(name) {
            page.offer(&key);
        } else if name.starts_with("h-") {
            if let Some(key) = hashed_key(&entry.path()) {
                page.offer(&key);
            }
        }
    }
    Ok(page.finish())
}

/// The key inside a hashed name's record, if it can be read and belongs there.
fn hashed_key(path: &Path) -> Option<String> {
    let file = open(path, false).ok()?;
    let slots = Slots::read(&file).ok()?;
    let record = slots.current().ok()??;
    let name = path.file_name()?.to_str()?;
    (crate::names::file_name(&record.key) == name).then(|| record.key.clone())
}
