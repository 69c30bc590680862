//! A nightly report that takes a while and must never run twice at once, even when every
//! server's cron fires it at the same minute.
//!
//! Two "servers" (here two tasks, each with its own `Locker`, as two processes would have)
//! start the report together on the file backend. One obtains the lock and works while a
//! watchdog prolongs it; the other sees who holds it and skips this run. The worker passes
//! its fencing token to the "database", which refuses writes from an older token.
//!
//! Run: `cargo run -p examples --example cron_report` (set `LOCK_DIR` to choose the lock
//! directory; the default is `<temp dir>/distlock-examples`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::FileBackend;
use distlock::{Attempt, LockBackend, Locker};

/// The protected resource: it remembers the highest fencing token it has seen.
#[derive(Default)]
struct ReportTable {
    highest_fencing: AtomicU64,
}

impl ReportTable {
    fn write(&self, fencing: u64, line: &str) -> Result<(), String> {
        let seen = self.highest_fencing.fetch_max(fencing, Ordering::SeqCst);
        if fencing < seen {
            return Err(format!(
                "refused write with stale fencing {fencing} (seen {seen})"
            ));
        }
        println!("    table <- {line} (fencing {fencing})");
        Ok(())
    }
}

async fn run_report(
    server: &str,
    backend: Arc<dyn LockBackend>,
    table: Arc<ReportTable>,
) -> distlock::Result<()> {
    let locker = Locker::new(backend).with_metadata(format!("cron_report on {server}"))?;
    let attempt = locker
        .lock("nightly-report")
        .ttl(Duration::from_secs(3))
        .wait(Duration::from_millis(500))
        .dont_queue()
        .watchdog()
        .obtain()
        .await?;
    let guard = match attempt {
        Attempt::Obtained(guard) => guard,
        Attempt::Busy(busy) => {
            println!("[{server}] skipping this run: the report is {busy}");
            return Ok(());
        }
    };
    println!(
        "[{server}] obtained the lock, fencing token {}",
        guard.fencing()
    );
    for step in 1..=4 {
        tokio::select! {
            _ = guard.lost() => {
                println!("[{server}] lost the lock mid-report: stopping, another run owns it now");
                return Ok(());
            }
            _ = tokio::time::sleep(Duration::from_millis(400)) => {}
        }
        let line = format!("{server}: section {step} of 4");
        if let Err(refused) = table.write(guard.fencing().0, &line) {
            println!("[{server}] {refused}");
            return Ok(());
        }
    }
    let outcome = guard.release().await?;
    println!("[{server}] report done, lock released: {outcome:?}");
    Ok(())
}

#[tokio::main]
async fn main() -> distlock::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_writer(std::io::stderr)
        .init();
    let dir = std::env::var_os("LOCK_DIR")
        .map(Into::into)
        .unwrap_or_else(|| std::env::temp_dir().join("distlock-examples"));
    println!("lock directory: {}", dir.display());
    let backend: Arc<dyn LockBackend> = Arc::new(FileBackend::new(&dir)?);
    let table = Arc::new(ReportTable::default());
    let a = tokio::spawn(run_report("server-a", backend.clone(), table.clone()));
    let b = tokio::spawn(run_report("server-b", backend.clone(), table.clone()));
    for run in [a, b] {
        run.await.expect("the report task panicked")?;
    }
    println!("exactly one server wrote the report; the other skipped the run");
    Ok(())
}
