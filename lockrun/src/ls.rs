//! `lockrun ls`: every lock under a prefix, as a table a person reads or as JSON for
//! scripts, page by page (memory stays that of one page, whatever the number of keys).

use std::io::{self, Write};
use std::process::ExitCode;

use lock_core::listing::Listed;
use lock_core::{Error, ErrorKind, LockBackend, Operation};

use crate::view::{self, Row};

/// Locks per table chunk: each chunk's columns are as wide as its own cells.
const CHUNK: usize = 1_000;

/// Prints the locks under `prefix` to standard output.
pub(crate) async fn ls(backend: &dyn LockBackend, prefix: &str, json: bool) -> ExitCode {
    // Not locked: the listing awaits the backend between pages.
    let mut out = io::BufWriter::new(io::stdout());
    let mut failed: Option<io::Error> = None;
    let mut count = 0usize;
    let mut rows: Vec<Row> = Vec::new();
    let mut titles = true;
    if json {
        if let Err(e) = out.write_all(b"[") {
            return quiet(e);
        }
    }
    let walked = {
        let mut each = |listed: Listed| {
            count += 1;
            let written = if json {
                write_json(&mut out, &listed, count == 1)
            } else {
                rows.extend(view::rows(&listed));
                if count.is_multiple_of(CHUNK) {
                    let w = write_table(&mut out, &rows, titles);
                    titles = false;
                    rows.clear();
                    w
                } else {
                    Ok(())
                }
            };
            match written {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        };
        view::walk(backend, prefix, &mut each).await
    };
    if let Some(e) = failed {
        return quiet(e);
    }
    if let Err(e) = walked {
        let _ = out.flush();
        return crate::fail(&e);
    }
    let end = if json {
        out.write_all(if count == 0 { b"]\n" } else { b"\n]\n" })
    } else if count == 0 {
        writeln!(out, "no locks under {:?}", view::printable(prefix))
    } else {
        write_table(&mut out, &rows, titles)
    };
    match end.and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => quiet(e),
    }
}

fn write_json(out: &mut impl Write, listed: &Listed, first: bool) -> io::Result<()> {
    out.write_all(if first { b"\n" } else { b",\n" })?;
    serde_json::to_writer(&mut *out, listed).map_err(io::Error::other)
}

fn write_table(out: &mut impl Write, rows: &[Row], titles: bool) -> io::Result<()> {
    let table = view::table(rows);
    let body = match titles {
        true => table.as_str(),
        false => table.split_once('\n').map_or("", |(_, rest)| rest),
    };
    out.write_all(body.as_bytes())
}

/// A reader that went away (`lockrun ls | head`) ends the listing quietly; any other
/// failure to write is said.
fn quiet(e: io::Error) -> ExitCode {
    if e.kind() == io::ErrorKind::BrokenPipe {
        return ExitCode::SUCCESS;
    }
    crate::fail(&Error::new(
        ErrorKind::Unavailable,
        "lockrun",
        Operation::List,
        format!("cannot write the listing: {e}"),
    ))
}
