//! Worker processes: the job a multi-process case hands a copy of its own test binary
//! (through an environment variable), and the spawning and waiting on the parent's side.
//! The parent re-runs its test binary with the suite's ignored worker test selected
//! ([`Suite::worker_test`]); the worker connects to the same backend from the harness's
//! [`shared_config`](crate::Harness::shared_config) and does the job
//! ([`run_worker`](crate::run_worker)).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};

use crate::{ensure, Failure, Suite};

/// The environment variable that carries a worker's job.
pub const WORKER_ENV: &str = "LOCK_CONFORMANCE_WORKER";

/// What a worker process does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    /// The harness's shared configuration.
    pub config: String,
    /// The key to contend for.
    pub key: String,
    /// The keys of a `lock-all` job.
    #[serde(default)]
    pub keys: Vec<String>,
    /// `contend` (obtain, log, release, `rounds` times), `semaphore` (the same with one of
    /// [`SEMAPHORE_PERMITS`](crate::process::SEMAPHORE_PERMITS) permits, holding each a
    /// little longer), `hold` (obtain, report, sleep), `hold-permit` (the same with one
    /// permit of a semaphore of 2) or `history` (see [`Job::history`]).
    pub mode: String,
    /// Rounds for `contend`.
    pub rounds: usize,
    /// The ttl in milliseconds.
    pub ttl_ms: u64,
    /// Where the worker writes its log.
    pub out: PathBuf,
    /// For a `history` job: its clients, run with the history workload's.
    #[serde(default)]
    pub history: Option<HistoryJob>,
}

/// What a `history` worker runs: its clients' numbers and count, where its calls are
/// numbered from, the parent's clock epoch and run length, and the seed
/// (see [`history`](crate::history)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryJob {
    /// The first client's number.
    pub first_client: usize,
    /// How many clients.
    pub clients: usize,
    /// The first call's number (apart from every other process's).
    pub first_op: usize,
    /// The parent's recorder epoch ([`monotonic_ns`](crate::history::monotonic_ns)).
    pub epoch: u64,
    /// How long after the epoch the clients stop.
    pub duration_ms: u64,
    /// The seed of the clients' choices.
    pub seed: u64,
}

/// Starts a worker process on `job`.
pub(crate) fn spawn(suite: &Suite, job: &Job) -> Result<Child, Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure(format!("current_exe: {e}")))?;
    Command::new(exe)
        .args([
            suite.worker_test.as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            WORKER_ENV,
            serde_json::to_string(job).map_err(|e| Failure(e.to_string()))?,
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure(format!("spawning a worker: {e}")))
}

/// Runs one worker process per job, all at once, and waits for every one of them (300 s at
/// most: a worker that takes longer is stuck): the logs they wrote, in the jobs' order.
pub(crate) async fn run_workers(
    suite: &Suite,
    jobs: impl IntoIterator<Item = Job>,
) -> Result<Vec<PathBuf>, Failure> {
    let mut children = Vec::new();
    for job in jobs {
        children.push((spawn(suite, &job)?, job.out));
    }
    wait_all(children).await
}

/// Waits for every worker (300 s at most), each with the log it writes: the logs, in the
/// workers' order.
pub(crate) async fn wait_all(children: Vec<(Child, PathBuf)>) -> Result<Vec<PathBuf>, Failure> {
    let mut logs = Vec::with_capacity(children.len());
    for (mut child, out) in children {
        let status = tokio::time::timeout(Duration::from_secs(300), child.wait())
            .await
            .map_err(|_| Failure("a worker did not finish within 300 s".into()))?
            .map_err(|e| Failure(format!("waiting for a worker: {e}")))?;
        ensure!(status.success(), "a worker failed: {status}");
        logs.push(out);
    }
    Ok(logs)
}
