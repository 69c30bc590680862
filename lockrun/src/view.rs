//! What `ls`, `top` and `serve` show of a listing: the walk over its pages, and each lock as
//! rows a person reads (one per hold), with every text from the store made safe to print.

use std::time::Duration;

use lock_core::backend::KeysRequest;
use lock_core::listing::{self, Listed};
use lock_core::{HolderInfo, LockBackend, LockState, Mode, Result};

/// Keys asked per page of a walk.
pub(crate) const PAGE: usize = 500;

/// Walks every lock under `prefix`, a page at a time, handing each to `each` (memory stays
/// that of one page); stops early when `each` says so. Whether it stopped early.
pub(crate) async fn walk(
    backend: &dyn LockBackend,
    prefix: &str,
    mut each: impl FnMut(Listed) -> bool,
) -> Result<bool> {
    let mut cursor = None;
    loop {
        let req = KeysRequest {
            prefix,
            cursor: cursor.as_ref(),
            limit: PAGE,
        };
        let page = listing::list(backend, req).await?;
        for listed in page.locks {
            if !each(listed) {
                return Ok(true);
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(false),
        }
    }
}

/// The first `most` locks under `prefix`, and whether there were more.
pub(crate) async fn first(
    backend: &dyn LockBackend,
    prefix: &str,
    most: usize,
) -> Result<(Vec<Listed>, bool)> {
    let mut locks = Vec::new();
    let cut = walk(backend, prefix, |l| {
        locks.push(l);
        locks.len() < most
    })
    .await?;
    Ok((locks, cut))
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    /// The key on a lock's first row, empty on the rows after it.
    pub(crate) key: String,
    pub(crate) mode: String,
    pub(crate) holder: String,
    pub(crate) remaining: String,
    pub(crate) fencing: String,
    pub(crate) holds: String,
    /// Who waits, on a lock's first row: tasks, and processes when more than one.
    pub(crate) waiting: String,
}

/// The number of columns.
pub(crate) const COLUMNS: usize = 7;

/// The column titles, in the order of [`Row::cells`].
pub(crate) const TITLES: [&str; COLUMNS] = [
    "KEY",
    "MODE",
    "HOLDER",
    "REMAINING",
    "FENCING",
    "HOLDS",
    "WAITING",
];

impl Row {
    pub(crate) fn cells(&self) -> [&str; COLUMNS] {
        [
            &self.key,
            &self.mode,
            &self.holder,
            &self.remaining,
            &self.fencing,
            &self.holds,
            &self.waiting,
        ]
    }
}

/// The rows of one lock: one per hold, then one for a waiting writer's marker.
pub(crate) fn rows(listed: &Listed) -> Vec<Row> {
    let key = printable(listed.key.as_str());
    let row =
        |mode: String, holder: String, remaining: Duration, fencing: String, holds: String| Row {
            key: String::new(),
            mode,
            holder,
            remaining: duration(remaining),
            fencing,
            holds,
            waiting: String::new(),
        };
    let mut rows = match &listed.state {
        LockState::Free => Vec::new(),
        LockState::Held {
            holder,
            fencing,
            remaining,
            holds,
        } => vec![row(
            "exclusive".into(),
            who(holder),
            *remaining,
            fencing.to_string(),
            holds.to_string(),
        )],
        LockState::Cooling { remaining } => vec![row(
            "cooling".into(),
            "-".into(),
            *remaining,
            "-".into(),
            "-".into(),
        )],
        LockState::Shared {
            capacity,
            holds,
            writer_waiting,
        } => {
            let mut rows: Vec<Row> = holds
                .iter()
                .map(|h| {
                    let mode = match *capacity {
                        Mode::UNBOUNDED => "read".to_owned(),
                        c => format!("{} of {c} permits", h.weight),
                    };
                    row(
                        mode,
                        who(&h.holder),
                        h.remaining,
                        h.fencing.to_string(),
                        h.holds.to_string(),
                    )
                })
                .collect();
            if let Some(marker) = writer_waiting {
                rows.push(row(
                    "writer waiting".into(),
                    "-".into(),
                    *marker,
                    "-".into(),
                    "-".into(),
                ));
            }
            rows
        }
    };
    if let Some(first) = rows.first_mut() {
        first.key = key;
        first.waiting = match listed.waiting {
            None => "-".into(),
            Some(w) if w.processes <= 1 => w.tasks.to_string(),
            Some(w) => format!("{} ({} procs)", w.tasks, w.processes),
        };
    }
    rows
}

/// How many tasks wait for the lock.
pub(crate) fn waiters(listed: &Listed) -> u32 {
    listed.waiting.map_or(0, |w| w.tasks)
}

/// How long a lock stays unavailable: its longest hold, cooldown or marker.
pub(crate) fn longest(listed: &Listed) -> Duration {
    match &listed.state {
        LockState::Free => Duration::ZERO,
        LockState::Held { remaining, .. } | LockState::Cooling { remaining } => *remaining,
        LockState::Shared {
            holds,
            writer_waiting,
            ..
        } => holds
            .iter()
            .map(|h| h.remaining)
            .chain(*writer_waiting)
            .max()
            .unwrap_or_default(),
    }
}

/// Whether a writer waits for the lock.
pub(crate) fn writer_waits(listed: &Listed) -> bool {
    matches!(
        listed.state,
        LockState::Shared {
            writer_waiting: Some(_),
            ..
        }
    )
}

/// `host:pid`, and the metadata in quotes, at most 60 characters.
fn who(holder: &HolderInfo) -> String {
    let mut s = format!("{}:{}", printable(&holder.host), holder.pid);
    if let Some(meta) = &holder.metadata {
        s.push_str(&format!(" \"{}\"", printable(meta)));
    }
    shorten(&s, 60)
}

/// `text` with every control character written as an escape (`\n`, `\u{1b}`): what a
/// holder stored never moves the cursor or colours a terminal.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| -> Box<dyn Iterator<Item = char>> {
            if c.is_control() {
                Box::new(c.escape_default())
            } else {
                Box::new(std::iter::once(c))
            }
        })
        .collect()
}

/// At most `max` characters, the cut marked with `…`.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// A remaining time as a person reads it: `850ms`, `12.3s`, `4m05s`, `3h12m`, `2d04h`.
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{}.{}s", s, d.subsec_millis() / 100),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The rows as a table padded to the widest cell of each column (the key's at most 48
/// characters wide, the cut marked), with the titles first.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut widths = TITLES.map(|t| t.chars().count());
    let cells: Vec<[String; COLUMNS]> = rows
        .iter()
        .map(|r| {
            let mut c = r.cells().map(str::to_owned);
            c[0] = shorten(&c[0], 48);
            c
        })
        .collect();
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; COLUMNS]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            // Numbers to the right, words to the left.
            let pad = w.saturating_sub(cell.chars().count());
            if (3..6).contains(&i) {
                l.push_str(&" ".repeat(pad));
                l.push_str(cell);
            } else {
                l.push_str(cell);
                l.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(TITLES);
    for row in &cells {
        line(row.each_ref().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::{Fencing, Key, SharedHold};

    fn holder(meta: &str) -> HolderInfo {
        HolderInfo {
            host: "web-1".into(),
            pid: 42,
            metadata: Some(meta.into()),
        }
    }

    #[test]
    fn a_semaphore_shows_a_row_per_hold_and_the_marker() {
        let listed = Listed {
            waiting: Some(lock_core::listing::Waiting {
                tasks: 3,
                processes: 2,
            }),
            key: Key::new("exports").unwrap(),
            state: LockState::Shared {
                capacity: 3,
                holds: vec![SharedHold {
                    holder: holder("a"),
                    fencing: Fencing(7),
                    remaining: Duration::from_millis(2_500),
                    holds: 1,
                    weight: 2,
                }],
                writer_waiting: Some(Duration::from_secs(1)),
            },
        };
        let rows = rows(&listed);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].key, "exports");
        assert_eq!(rows[0].mode, "2 of 3 permits");
        assert_eq!(rows[0].holder, "web-1:42 \"a\"");
        assert_eq!(rows[0].remaining, "2.5s");
        assert_eq!(rows[1].key, "");
        assert_eq!(rows[0].waiting, "3 (2 procs)");
        assert_eq!(rows[1].mode, "writer waiting");
        let table = table(&rows);
        assert!(table.starts_with("KEY"), "{table}");
        assert_eq!(table.lines().count(), 3, "{table}");
    }

    #[test]
    fn what_a_holder_stored_cannot_steer_a_terminal() {
        assert_eq!(printable("a\u{1b}[2Jb\nc"), "a\\u{1b}[2Jb\\nc");
        assert_eq!(who(&holder("x\ty")), "web-1:42 \"x\\ty\"");
        assert_eq!(shorten("abcdef", 4), "abc…");
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        let s = Duration::from_secs;
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(duration(s(245)), "4m05s");
        assert_eq!(duration(s(3 * 3600 + 12 * 60)), "3h12m");
        assert_eq!(duration(s(2 * 86_400 + 4 * 3600)), "2d04h");
    }
}
