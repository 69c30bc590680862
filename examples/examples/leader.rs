//! Three replicas of a service, one of them leads: kill the leader with SIGKILL, and
//! another takes over once the dead leader's lease (its ttl) has run out, with a higher
//! term. An observer prints every leader with its term.
//!
//! The replicas are real processes (this program run again with `replica N`), so the kill
//! is a real one: no release, no goodbye; the lease alone ends the dead leader's term.
//!
//! Run: `cargo run -p examples --example leader` (file backend in a temporary directory),
//! or with `LOCK_URL=redis://127.0.0.1:6379/0`, a Postgres or a MariaDB URL.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use distlock::{Locker, Retry};

/// The replicas' lease: a dead leader leads at most this long.
const LEASE: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, role, n, url] = &args[..] {
        if role == "replica" {
            return replica(n, url).await;
        }
    }
    let dir = std::env::temp_dir().join(format!("distlock-leader-{}", std::process::id()));
    let url = std::env::var("LOCK_URL").unwrap_or_else(|_| format!("file://{}", dir.display()));
    let key = format!("scheduler-{}", std::process::id());
    let locker = Locker::new(distlock::connect(&url).await?);
    let mut replicas: Vec<Child> = (0..3)
        .map(|n| {
            Command::new(std::env::current_exe()?)
                .args(["replica", &n.to_string(), &url])
                .env("LEADER_KEY", &key)
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let outcome = watch(&locker, &key, &mut replicas).await;
    for r in &mut replicas {
        let _ = r.kill();
        let _ = r.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

/// Observes the key: waits for the first leader, kills its process, and waits for the next.
async fn watch(
    locker: &Locker,
    key: &str,
    replicas: &mut [Child],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut who = locker.observe(key)?.every(Duration::from_millis(50));
    let first = loop {
        if let Some(leader) = who.changed().await? {
            break leader;
        }
    };
    let name = first.holder.metadata.clone().unwrap_or_default();
    println!("observer: {name} leads, term {}", first.term);
    let n: usize = name.trim_start_matches("replica ").parse()?;
    replicas[n].kill()?; // SIGKILL
    replicas[n].wait()?;
    let killed = Instant::now();
    println!("observer: killed {name} (SIGKILL); its lease ends within {LEASE:?}");
    let next = loop {
        if let Some(leader) = who.changed().await? {
            if leader.term != first.term {
                break leader;
            }
        }
    };
    let after = killed.elapsed();
    let next_name = next.holder.metadata.clone().unwrap_or_default();
    println!(
        "observer: {next_name} leads, term {} ({:.1} s after the kill)",
        next.term,
        after.as_secs_f64()
    );
    if next.term <= first.term || next_name == name {
        return Err(format!("no successor: {first:?} then {next:?}").into());
    }
    if after > LEASE + Duration::from_secs(5) {
        return Err(format!("the successor took {after:?}").into());
    }
    Ok(())
}

/// One replica: campaigns, works while it leads, campaigns again if it loses the lead.
async fn replica(n: &str, url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let key = std::env::var("LEADER_KEY")?;
    let locker = Locker::new(distlock::connect(url).await?).with_retry(
        Retry::exponential(Duration::from_millis(10), Duration::from_millis(200)).notified(),
    );
    loop {
        let Some(leader) = locker
            .elect(&key)
            .ttl(LEASE)
            .identity(format!("replica {n}"))
            .lead()
            .await?
            .obtained()
        else {
            continue;
        };
        leader
            .while_leading(|term| async move {
                loop {
                    println!("replica {n}: leading in term {term}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
            .await;
        println!("replica {n}: lost the lead; campaigning again");
    }
}
