//! Contenders as separate OS processes, and the checker that finds any overlap.
//!
//! The parent re-runs its own test binary with the suite's ignored worker test selected and
//! a job in `LOCK_CONFORMANCE_WORKER`; the worker connects to the same backend from the
//! harness's [`shared_config`](crate::Harness::shared_config), does the job, and writes one
//! line per critical section: `fencing start_ns end_ns` (wall clock, same machine).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::{Attempt, Fencing, LockBackend, Locker, ReleaseOutcome, Retry};
use tokio::process::Child;

use crate::harness::ms;
use crate::pace::Pace;
use crate::worker::{run_workers, spawn};
pub use crate::worker::{HistoryJob, Job, WORKER_ENV};
use crate::{ensure, CaseResult, Failure, Suite};

/// One critical section as a worker logged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// The fencing token it held.
    pub fencing: Fencing,
    /// Wall-clock nanoseconds when it was entered.
    pub start: u128,
    /// Wall-clock nanoseconds when it was left.
    pub end: u128,
}

/// Finds the first pair of critical sections that overlap in time, or whose fencing order
/// disagrees with their time order.
pub fn find_overlap(sections: &[Section]) -> Option<(Section, Section)> {
    let mut sorted = sections.to_vec();
    sorted.sort_by_key(|s| s.fencing);
    sorted
        .windows(2)
        .find(|w| w[0].end > w[1].start || w[0].fencing == w[1].fencing)
        .map(|w| (w[0], w[1]))
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The worker side of this module's jobs (`contend`, `semaphore`, `lock-all`, `hold`,
/// `hold-permit`) on `backend`, as [`crate::run_worker`] hands them over.
pub(crate) async fn run_job(backend: Arc<dyn LockBackend>, job: &Job) -> CaseResult {
    let locker = Locker::new(backend).with_retry(Retry::exponential(ms(1), ms(20)).notified());
    let io = |e: std::io::Error| Failure(format!("worker log {}: {e}", job.out.display()));
    let ttl = Duration::from_millis(job.ttl_ms);
    match job.mode.as_str() {
        "lock-all" => run_lock_all(&locker, job).await,
        "hold" | "hold-permit" => {
            let builder = match job.mode.as_str() {
                "hold" => locker.lock(&job.key),
                _ => locker.semaphore(&job.key, 2),
            };
            let guard = builder.ttl(ttl).try_obtain().await?;
            let Attempt::Obtained(guard) = guard else {
                return Err(Failure("the hold worker found the key busy".into()));
            };
            std::fs::write(&job.out, format!("{}\n", guard.fencing())).map_err(io)?;
            // Hold until killed: the parent checks what a SIGKILL leaves behind.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(())
        }
        _ => {
            let mut log = String::new();
            for _ in 0..job.rounds {
                let (builder, inside) = match job.mode.as_str() {
                    "semaphore" => (locker.semaphore(&job.key, SEMAPHORE_PERMITS), ms(20)),
                    _ => (locker.lock(&job.key), ms(2)),
                };
                let guard = match builder
                    .ttl(ttl)
                    .wait(Duration::from_secs(120))
                    .obtain()
                    .await?
                {
                    Attempt::Obtained(g) => g,
                    Attempt::Busy(b) => return Err(Failure(format!("worker gave up: {b}"))),
                };
                let start = now_ns();
                std::thread::sleep(inside);
                let end = now_ns();
                log.push_str(&format!("{} {start} {end}\n", guard.fencing()));
                let _ = guard.release().await?;
            }
            std::fs::write(&job.out, log).map_err(io)
        }
    }
}

/// The worker side of a `lock-all` job: `rounds` times, the job's keys in a random order,
/// taken with `lock_all` (waiting up to 120 s), held 2 ms, released.
async fn run_lock_all(locker: &Locker, job: &Job) -> CaseResult {
    let mut log = String::new();
    let mut keys = job.keys.clone();
    for _ in 0..job.rounds {
        fastrand::shuffle(&mut keys);
        let set = match locker
            .lock_all(&keys)
            .ttl(Duration::from_millis(job.ttl_ms))
            .wait(Duration::from_secs(120))
            .obtain()
            .await?
        {
            Attempt::Obtained(set) => set,
            Attempt::Busy(b) => return Err(Failure(format!("lock_all gave up after 120 s: {b}"))),
        };
        let start = now_ns();
        std::thread::sleep(ms(2));
        let end = now_ns();
        for (key, fencing) in set.fencing() {
            log.push_str(&format!("{key} {fencing} {start} {end}\n"));
        }
        set.release().await?;
    }
    std::fs::write(&job.out, log)
        .map_err(|e| Failure(format!("worker log {}: {e}", job.out.display())))
}

/// Spawns a `hold` or `hold-permit` worker and waits (up to 60 s) until it reports holding.
async fn spawn_holder(suite: &Suite, job: &Job) -> Result<Child, Failure> {
    let child = spawn(suite, job)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !job.out.exists() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the holder process did not report within 60 s"
        );
        tokio::time::sleep(ms(20)).await;
    }
    Ok(child)
}

fn parse(path: &Path) -> Result<Vec<Section>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure(format!("worker log {}: {e}", path.display())))?;
    text.lines()
        .map(|line| {
            let mut parts = line.split(' ').map(str::parse::<u128>);
            match (parts.next(), parts.next(), parts.next()) {
                (Some(Ok(f)), Some(Ok(start)), Some(Ok(end))) => Ok(Section {
                    fencing: Fencing(f as u64),
                    start,
                    end,
                }),
                _ => Err(Failure(format!("bad worker log line {line:?}"))),
            }
        })
        .collect()
}

/// `None` means the backend declared itself single-process and the harness agrees.
pub(super) async fn shared_config(suite: &Suite) -> Result<Option<String>, Failure> {
    let config = suite.harness.shared_config().await;
    if config.is_none() {
        let backend = suite.harness.backend().await;
        ensure!(
            !backend.capabilities().cross_process,
            "{} declares cross_process but its harness gives no shared_config to run processes with",
            backend.name()
        );
    }
    Ok(config)
}

/// Four OS processes contend for one key, ten rounds each: no two critical sections
/// overlap, and fencing order is time order.
pub async fn multiprocess_exclusion(suite: &Suite) -> CaseResult {
    const PROCESSES: usize = 4;
    const ROUNDS: usize = 10;
    let Some(config) = shared_config(suite).await? else {
        return Ok(());
    };
    let sections = contend(suite, &config, "multiprocess", "contend", PROCESSES, ROUNDS).await?;
    if let Some((a, b)) = find_overlap(&sections) {
        return Err(Failure(format!(
            "two processes held the lock at once: {a:?} and {b:?}"
        )));
    }
    Ok(())
}

/// Runs `processes` workers of `mode` on `key`, `rounds` each, and gathers the critical
/// sections they logged (all of them, or a failure saying what is missing).
async fn contend(
    suite: &Suite,
    config: &str,
    key: &str,
    mode: &str,
    processes: usize,
    rounds: usize,
) -> Result<Vec<Section>, Failure> {
    let dir = tempfile::tempdir().map_err(|e| Failure(format!("tempdir: {e}")))?;
    let jobs = (0..processes).map(|i| Job {
        config: config.to_owned(),
        key: key.into(),
        keys: Vec::new(),
        mode: mode.into(),
        rounds,
        ttl_ms: 30_000,
        out: dir.path().join(format!("worker-{i}.log")),
        history: None,
    });
    let mut sections = Vec::new();
    for out in run_workers(suite, jobs).await? {
        sections.extend(parse(&out)?);
    }
    ensure!(
        sections.len() == processes * rounds,
        "{} sections logged, expected {}",
        sections.len(),
        processes * rounds
    );
    Ok(sections)
}

/// The permits of the semaphore [`multiprocess_semaphore_stays_within_its_permits`]'s
/// workers share.
pub const SEMAPHORE_PERMITS: u32 = 2;

/// Four processes take one of 2 permits of a semaphore ten times each, holding each 20 ms:
/// at no instant do more than 2 of them hold one, and every admission has its own fencing
/// token. Skipped for a backend without shared holds.
pub async fn multiprocess_semaphore_stays_within_its_permits(suite: &Suite) -> CaseResult {
    const PROCESSES: usize = 4;
    const ROUNDS: usize = 10;
    if !suite.harness.backend().await.capabilities().shared {
        super::report(format_args!(
            "{}: multiprocess_semaphore_stays_within_its_permits: skipped, the backend keeps \
             exclusive locks only",
            suite.name
        ));
        return Ok(());
    }
    let Some(config) = shared_config(suite).await? else {
        return Ok(());
    };
    let sections = contend(
        suite,
        &config,
        "multiprocess-semaphore",
        "semaphore",
        PROCESSES,
        ROUNDS,
    )
    .await?;
    let mut tokens: Vec<Fencing> = sections.iter().map(|s| s.fencing).collect();
    tokens.sort();
    tokens.dedup();
    ensure!(
        tokens.len() == sections.len(),
        "two admissions shared a fencing token"
    );
    // Every entry and exit in time order (an exit before an entry at the same instant):
    // the count inside never passes the permits.
    let mut events: Vec<(u128, i32)> = sections
        .iter()
        .flat_map(|s| [(s.start, 1), (s.end, -1)])
        .collect();
    events.sort();
    let mut inside = 0;
    for (at, step) in events {
        inside += step;
        ensure!(
            inside <= i32::try_from(SEMAPHORE_PERMITS).unwrap_or(i32::MAX),
            "{inside} processes held a permit of {SEMAPHORE_PERMITS} at once (at {at} ns)"
        );
    }
    Ok(())
}

/// A child process holds the lock; the parent's try is Busy; the child is killed with
/// SIGKILL; the parent obtains after the ttl, and not long after.
pub async fn killed_holder_frees_after_ttl(suite: &Suite) -> CaseResult {
    let Some(config) = shared_config(suite).await? else {
        return Ok(());
    };
    let dir = tempfile::tempdir().map_err(|e| Failure(format!("tempdir: {e}")))?;
    let job = Job {
        config: config.clone(),
        key: "killed".into(),
        mode: "hold".into(),
        rounds: 1,
        ttl_ms: 1_500,
        out: dir.path().join("holder.log"),
        history: None,
        keys: Vec::new(),
    };
    let mut child = spawn_holder(suite, &job).await?;
    let backend = suite.harness.connect(&config).await;
    let pace = Pace::of(&*backend, "killed_holder_frees_after_ttl");
    let locker = Locker::new(backend);
    ensure!(
        locker.lock("killed").try_obtain().await?.is_busy(),
        "the child holds the lock"
    );
    child
        .start_kill()
        .map_err(|e| Failure(format!("kill: {e}")))?;
    let _ = child.wait().await;
    let killed = tokio::time::Instant::now();
    // What the server may keep a 1.5 s hold for beyond it (nothing on an exact backend),
    // on top of the bounds written for one.
    let over = pace.longest(ms(1_500)) - ms(1_500);
    let got = locker
        .lock("killed")
        .wait(Duration::from_secs(10) + over)
        .obtain()
        .await?;
    ensure!(
        got.obtained().is_some(),
        "the killed holder's lock was not free {:?} later",
        Duration::from_secs(10) + over
    );
    ensure!(
        killed.elapsed() < Duration::from_secs(5) + over,
        "took {:?} after a 1.5 s ttl",
        killed.elapsed()
    );
    Ok(())
}

/// A child process holds one permit of a semaphore of 2 and the parent the other; the child
/// is killed with SIGKILL: a third request gets the child's permit after the child's ttl
/// (1.5 s), and not long after, while the parent's permit, with its own long ttl, stays held
/// and its guard never lost.
pub async fn killed_holder_frees_only_its_own_permits(suite: &Suite) -> CaseResult {
    let Some(config) = shared_config(suite).await? else {
        return Ok(());
    };
    let backend = suite.harness.connect(&config).await;
    if !backend.capabilities().shared {
        super::report(format_args!(
            "{}: killed_holder_frees_only_its_own_permits: skipped, the backend keeps \
             exclusive locks only",
            suite.name
        ));
        return Ok(());
    }
    let dir = tempfile::tempdir().map_err(|e| Failure(format!("tempdir: {e}")))?;
    let job = Job {
        config,
        key: "killed-permit".into(),
        mode: "hold-permit".into(),
        rounds: 1,
        ttl_ms: 1_500,
        out: dir.path().join("holder.log"),
        history: None,
        keys: Vec::new(),
    };
    let mut child = spawn_holder(suite, &job).await?;
    let locker = Locker::new(backend);
    let semaphore = || locker.semaphore("killed-permit", 2);
    let Attempt::Obtained(mine) = semaphore()
        .ttl(Duration::from_secs(60))
        .try_obtain()
        .await?
    else {
        return Err(Failure("the second permit was not free".into()));
    };
    ensure!(
        semaphore().try_obtain().await?.is_busy(),
        "the child and the parent hold both permits"
    );
    child
        .start_kill()
        .map_err(|e| Failure(format!("kill: {e}")))?;
    let _ = child.wait().await;
    let killed = tokio::time::Instant::now();
    let third = semaphore()
        .wait(Duration::from_secs(10))
        .obtain()
        .await?
        .obtained();
    let Some(third) = third else {
        return Err(Failure(
            "the killed holder's permit was not free 10 s later".into(),
        ));
    };
    ensure!(
        killed.elapsed() < Duration::from_secs(5),
        "took {:?} after a 1.5 s ttl",
        killed.elapsed()
    );
    ensure!(
        !mine.is_lost(),
        "the parent's permit was lost with the child's"
    );
    ensure!(
        mine.release().await? == ReleaseOutcome::Released,
        "the parent's permit was still held"
    );
    ensure!(
        third.release().await? == ReleaseOutcome::Released,
        "the third permit releases"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(f: u64, start: u128, end: u128) -> Section {
        Section {
            fencing: Fencing(f),
            start,
            end,
        }
    }

    #[test]
    fn overlap_checker_finds_overlaps_and_order_mistakes() {
        assert_eq!(
            find_overlap(&[s(1, 0, 10), s(2, 10, 20), s(3, 25, 30)]),
            None
        );
        assert!(
            find_overlap(&[s(1, 0, 10), s(2, 5, 20)]).is_some(),
            "overlap"
        );
        assert!(
            find_overlap(&[s(2, 0, 10), s(1, 20, 30)]).is_some(),
            "fencing against time order"
        );
        assert!(
            find_overlap(&[s(1, 0, 10), s(1, 20, 30)]).is_some(),
            "duplicate fencing"
        );
    }
}
