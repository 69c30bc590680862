//! A failure's timeline, as a person sees it: the page opened in a real headless Chromium
//! (Debian's `chromium`), its DOM read back and a screenshot taken. The page must render,
//! name the rule, and show the two violating holds outlined in red.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lock_conformance::history::{check, write_timeline, Ask, Call, Event, History, Return};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Two clients relying on exclusive holds of one key at once (and a third on another key).
fn overlapping() -> History {
    let mut events = Vec::new();
    for (op, client, key, obtained, until) in [
        (0, 0, "k", 10, 400),
        (1, 1, "k", 200, 600),
        (2, 2, "other", 20, 300),
    ] {
        events.push(Event::Invoke {
            op,
            client,
            key: key.into(),
            call: Call::Obtain {
                ask: Ask::Exclusive,
                wait: false,
            },
            at: ms(obtained - 5),
        });
        events.push(Event::Return {
            op,
            result: Return::Obtained {
                fencing: 100 + op as u64,
            },
            at: ms(obtained),
        });
        events.push(Event::Claim {
            hold: op,
            at: ms(until),
        });
    }
    History { events }
}

/// Debian's Chromium, or a failure that says how to install it.
fn chromium() -> PathBuf {
    for candidate in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(out) = Command::new("which").arg(candidate).output() {
            if out.status.success() {
                return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            }
        }
    }
    panic!(
        "no headless browser to check the timeline page with: install Debian's chromium \
         (apt-get install chromium); scripts/test.sh installs it"
    );
}

fn headless(page: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1600,400",
        ])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_timeline_shows_the_violating_holds_in_red() {
    let history = overlapping();
    let violation = check(&history).expect_err("two holds relied on at once");
    let page = write_timeline("timeline page", &history, &violation).expect("page written");

    // The DOM as the browser built it: the rule, the message, the two holds marked.
    let dom = String::from_utf8_lossy(&headless(&page, &["--dump-dom"]).stdout).into_owned();
    assert!(dom.contains("Exclusion on \"k\""), "{dom}");
    assert_eq!(dom.matches("class=\"violation\"").count(), 2, "{dom}");
    assert!(
        !dom.contains("\"other\""),
        "another key's holds are left out: {dom}"
    );

    // What a person sees: red outline pixels, in two separate lanes.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let shot = dir.path().join("timeline.png");
    headless(&page, &[&format!("--screenshot={}", shot.display())]);
    let decoder = png::Decoder::new(std::fs::File::open(&shot).expect("a screenshot"));
    let mut reader = decoder.read_info().expect("a png");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    let mut red_rows = Vec::new();
    for y in 0..info.height as usize {
        let row = &buf[y * info.line_size..(y + 1) * info.line_size];
        let red = row
            .chunks(channels)
            .filter(|p| p[0] > 180 && p[1] < 60 && p[2] < 60)
            .count();
        if red > 0 {
            red_rows.push(y);
        }
    }
    assert!(!red_rows.is_empty(), "no red outline in the screenshot");
    // Two lanes: the red rows fall in two bands apart.
    let bands = red_rows.windows(2).filter(|w| w[1] > w[0] + 4).count() + 1;
    assert!(
        bands >= 2,
        "the violating holds of two clients show in two lanes: red rows {red_rows:?}"
    );
    let _ = std::fs::remove_file(&page);
}
