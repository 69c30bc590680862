//! `lockrun top`: the listing, refreshed in place on the terminal's alternate screen until
//! Ctrl-C, sorted by wait: the locks most waited for first, then those that keep others
//! out longest.

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use lock_core::listing::Listed;
use lock_core::LockBackend;

use crate::view;

/// The most locks one refresh reads.
pub(crate) const MOST: usize = 10_000;

/// Shows the locks under `prefix` every `interval` until Ctrl-C or SIGTERM.
pub(crate) async fn top(
    backend: &dyn LockBackend,
    label: &str,
    prefix: &str,
    interval: Duration,
) -> ExitCode {
    if !io::stdout().is_terminal() {
        eprintln!(
            "lockrun: top refreshes a terminal in place, and standard output is not one; \
             use `lockrun ls` (or `lockrun ls --json`) in scripts"
        );
        return ExitCode::from(2);
    }
    let mut stop = match crate::Stop::watch() {
        Ok(stop) => stop,
        Err(status) => return status,
    };
    // The alternate screen, the cursor hidden: the shell's screen comes back on exit.
    let mut out = io::stdout();
    let _ = out.write_all(b"\x1b[?1049h\x1b[?25l");
    loop {
        let listed = view::first(backend, prefix, MOST).await;
        let (rows, cols) = size();
        let frame = frame(&listed, label, prefix, interval, rows, cols);
        let _ = out.write_all(b"\x1b[H\x1b[2J");
        let _ = out.write_all(frame.as_bytes());
        let _ = out.flush();
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stop.stopped() => break,
        }
    }
    let _ = out.write_all(b"\x1b[?25h\x1b[?1049l");
    let _ = out.flush();
    ExitCode::SUCCESS
}

/// One screen: a status line, then the table cut to the terminal.
fn frame(
    listed: &lock_core::Result<(Vec<Listed>, bool)>,
    label: &str,
    prefix: &str,
    interval: Duration,
    rows: usize,
    cols: usize,
) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut status = format!("lockrun top  {label}");
    if !prefix.is_empty() {
        status.push_str(&format!("  prefix {:?}", view::printable(prefix)));
    }
    match listed {
        Ok((locks, cut)) => {
            let more = if *cut { "+" } else { "" };
            status.push_str(&format!(
                "  {}{more} locks  every {}  Ctrl-C quits",
                locks.len(),
                view::duration(interval)
            ));
            lines.push(status);
            lines.push(String::new());
            if locks.is_empty() {
                lines.push("no locks".into());
            } else {
                let mut sorted: Vec<&Listed> = locks.iter().collect();
                // By wait: the most waiters first, then a waiting writer, then the lock
                // that stays unavailable longest.
                let rank = |l: &Listed| (view::waiters(l), view::writer_waits(l), view::longest(l));
                sorted.sort_by(|a, b| rank(b).cmp(&rank(a)).then_with(|| a.key.cmp(&b.key)));
                let rows: Vec<view::Row> = sorted.into_iter().flat_map(view::rows).collect();
                lines.extend(view::table(&rows).lines().map(str::to_owned));
            }
        }
        Err(e) => {
            lines.push(status);
            lines.push(String::new());
            lines.push(format!("the listing failed: {e}"));
            lines.push("(trying again at the next refresh)".into());
        }
    }
    let rows = rows.max(3);
    if lines.len() > rows {
        // The last line says what did not fit.
        let hidden = lines.len() - (rows - 1);
        lines.truncate(rows - 1);
        lines.push(format!("… {hidden} more lines"));
    }
    let shown: Vec<String> = lines
        .iter()
        .map(|l| view::shorten(l, cols.max(20)))
        .collect();
    shown.join("\r\n")
}

/// The terminal's rows and columns (24 × 80 when it does not say).
fn size() -> (usize, usize) {
    match rustix::termios::tcgetwinsize(io::stdout()) {
        Ok(w) if w.ws_row > 0 && w.ws_col > 0 => (usize::from(w.ws_row), usize::from(w.ws_col)),
        _ => (24, 80),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::{Fencing, HolderInfo, Key, LockState};

    fn held(key: &str, secs: u64) -> Listed {
        Listed {
            waiting: None,
            key: Key::new(key).unwrap(),
            state: LockState::Held {
                holder: HolderInfo::current(),
                fencing: Fencing(1),
                remaining: Duration::from_secs(secs),
                holds: 1,
            },
        }
    }

    #[test]
    fn the_lock_that_keeps_others_out_longest_comes_first_and_the_screen_is_filled_at_most() {
        let locks = (0..30).map(|i| held(&format!("k{i:02}"), i)).collect();
        let frame = frame(
            &Ok((locks, false)),
            "file:///x",
            "",
            Duration::from_secs(1),
            10,
            80,
        );
        let lines: Vec<&str> = frame.split("\r\n").collect();
        assert_eq!(lines.len(), 10, "{frame}");
        assert!(lines[0].contains("30 locks"), "{frame}");
        assert!(lines[3].starts_with("k29"), "{frame}");
        assert!(lines[9].starts_with("… 24 more lines"), "{frame}");
    }
}
