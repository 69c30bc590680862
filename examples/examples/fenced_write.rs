//! Why a fencing token must be checked where the write lands: a holder frozen past its
//! ttl (here with SIGSTOP, as a long GC pause or a stopped VM would) wakes up still
//! believing it holds the lock. Meanwhile the lock went to someone else, who wrote. The
//! frozen holder's late write is refused by the fence (`distlock::fence::file`), and the
//! new holder's content stays.
//!
//! The old holder is a real process (this program run again with `holder`), frozen and
//! thawed with real signals.
//!
//! Run: `cargo run -p examples --example fenced_write` (file backend in a temporary
//! directory), or with `LOCK_URL` set to a Redis, Postgres or MariaDB URL.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use distlock::{ErrorKind, Locker};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The old holder's ttl: it is frozen for longer than this.
const TTL: Duration = Duration::from_secs(1);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, role, url, key, report] = &args[..] {
        if role == "holder" {
            return holder(url, key, Path::new(report)).await;
        }
    }
    let dir = tempfile::tempdir()?;
    let url = std::env::var("LOCK_URL")
        .unwrap_or_else(|_| format!("file://{}", dir.path().join("locks").display()));
    let key = format!("report-{}", std::process::id());
    let report = dir.path().join("report.txt");

    let mut old = Command::new(std::env::current_exe()?)
        .args(["holder", &url, &key])
        .arg(&report)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut said = BufReader::new(old.stdout.take().ok_or("the holder's stdout")?).lines();
    let ready = said.next().ok_or("the holder ended early")??;
    println!("{ready}");
    let pid = Pid::from_raw(i32::try_from(old.id())?);
    kill(pid, Signal::SIGSTOP)?;
    println!("main: froze the old holder (SIGSTOP) for {:?}", TTL * 2);
    tokio::time::sleep(TTL * 2).await;

    let locker = Locker::new(distlock::connect(&url).await?);
    let new = locker
        .lock(&key)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(10))
        .obtain()
        .await?
        .obtained()
        .ok_or("the old holder's lock did not expire")?;
    distlock::fence::file::write(&report, new.fencing(), b"the new holder's report\n")?;
    println!(
        "main: the new holder (token {}) wrote its report",
        new.fencing()
    );

    kill(pid, Signal::SIGCONT)?;
    old.stdin
        .take()
        .ok_or("the holder's stdin")?
        .write_all(b"go\n")?;
    for line in said {
        println!("{}", line?);
    }
    let status = old.wait()?;
    let _released = new.release().await?;
    let content = std::fs::read_to_string(&report)?;
    println!("main: the report says {:?}", content.trim_end());
    if !status.success() || content != "the new holder's report\n" {
        return Err("the old holder's late write landed".into());
    }
    Ok(())
}

/// The old holder: takes the lock, writes, says it is ready, and after its freeze (it
/// does not know about it) writes again.
async fn holder(url: &str, key: &str, report: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let locker = Locker::new(distlock::connect(url).await?);
    let guard = locker
        .lock(key)
        .ttl(TTL)
        .try_obtain()
        .await?
        .obtained()
        .ok_or("the lock is busy")?;
    distlock::fence::file::write(
        report,
        guard.fencing(),
        b"the old holder's report, part 1\n",
    )?;
    println!("old holder: wrote part 1 with token {}", guard.fencing());
    std::io::stdout().flush()?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    match distlock::fence::file::write(report, guard.fencing(), b"the old holder's part 2\n") {
        Err(e) if e.kind() == ErrorKind::StaleToken => {
            println!("old holder: my late write was refused: {}", e.message());
            Ok(())
        }
        Err(e) => Err(e.into()),
        Ok(()) => Err("old holder: my late write landed".into()),
    }
}
